# Rollcall build. `make test` is what CI runs (through .ci/run).
GO        ?= go
PKGS      := ./...
# The pure packages: no goroutines, no I/O. The race detector can find
# nothing in them and makes them five times slower, so `make test` runs
# them once without it.
PURE_PKGS := ./crdt ./dissem ./sim
RACE_PKGS  = $(filter-out $(shell $(GO) list $(PURE_PKGS)),$(shell $(GO) list $(PKGS)))
# The bench lab (baselines, bench-compare, hbgen): a module of its own, so
# the product's dependencies are not the lab's (docs/bench-compare.md).
LAB       := benchlab
BIN       := bin/rollcall
FUZZTIME  ?= 10s
BENCHTIME ?= 1s
# make bench: the hot paths' micro-benchmarks (heartbeat, request decoding,
# fan-out, merge, encoding, token checks; a few minutes). BENCH=. runs every
# benchmark of every package (the cluster, simulator and memory ones take
# long), BENCH=<regexp> those it matches.
BENCH      ?=
BENCH_HOT  := ^Benchmark(Heartbeat|DecodeRequest|StatusChangeFanout|RemoteChurnFlush|Apply|Codec|Wire|Verify)
BENCH_PKGS := $(if $(BENCH),$(PKGS),./node ./crdt ./dissem ./auth)
# make chaos: seconds per seed, seeds (1..20, 3,7; empty: one from the
# clock), agents per run; CHAOS_NETNS=1 adds network faults (root).
CHAOS_DURATION ?= 60s
CHAOS_SEEDS    ?=
CHAOS_GATEWAYS ?= 3
# make calibrate: where the plot goes (PLOT=docs/sim-calibration.svg
# refreshes the one in the docs).
PLOT           ?= bin/sim-calibration.svg
# make calibrate-bench: calibrations per mode.
CALIBRATE_RUNS ?= 5
# What `rollcall version` says, from git (dev outside a checkout).
VERSION     ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
REVISION    := $(shell git rev-parse HEAD 2>/dev/null)
COMMIT_TIME := $(shell git log -1 --format=%cI 2>/dev/null)
MODIFIED    := $(shell test -n "$$(git status --porcelain 2>/dev/null)" && echo true || echo false)
LDFLAGS     := -X main.version=$(VERSION) -X main.revision=$(REVISION) -X main.commitTime=$(COMMIT_TIME) -X main.modified=$(MODIFIED)
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.7.0

.PHONY: bench-compare all build test test-short bench lint fuzz run clean image secrets e2e calibrate calibrate-bench pgo chaos scale

all: build

# Release-style: no symbol table or DWARF (-s -w; panics and profiles
# still name functions), no build-machine paths (-trimpath).
build:
	$(GO) build -trimpath -ldflags '-s -w $(LDFLAGS)' -o $(BIN) ./cmd/rollcall

# All packages, race detector on, the bench lab's too, except the pure
# ones (PURE_PKGS) and the simulator's scenario goldens (single-goroutine,
# deterministic runs, skipped under -race), which run without it.
# Property tests run 1,000 cases per law. The gateway's protocol suite runs
# again over each of NODE_TRANSPORTS: WebSocket (ws), TCP served by
# goroutines (tcpgo, the path TLS takes) rather than the event loop, and
# the event loop in its io_uring mode (uring, --io-uring).
NODE_TRANSPORTS ?= ws tcpgo uring
test:
	$(GO) test -race -count=1 -timeout 20m $(RACE_PKGS)
	$(GO) test -count=1 -timeout 20m $(PURE_PKGS)
	$(GO) test -count=1 -timeout 20m -run '^TestScenarios$$' ./sim/simcli
	for t in $(NODE_TRANSPORTS); do $(GO) test -race -count=1 -timeout 20m ./node -args -transport=$$t || exit 1; done
	cd $(LAB) && $(GO) test -race -count=1 -timeout 20m $(PKGS)

test-short:
	$(GO) test -short -count=1 $(PKGS)
	cd $(LAB) && $(GO) test -short -count=1 $(PKGS)

bench:
	$(GO) test -run '^$$' -bench '$(or $(BENCH),$(BENCH_HOT))' -benchmem -benchtime $(BENCHTIME) $(BENCH_PKGS)

lint:
	@echo "== gofmt"
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@echo "== go vet"
	$(GO) vet $(PKGS)
	cd $(LAB) && $(GO) vet $(PKGS)
	@echo "== links: relative links and anchors of README.md and docs/ (.ci/checklinks.py)"
	python3 .ci/checklinks.py
	@echo "== staticcheck ($(STATICCHECK); the first run downloads and builds it, a few minutes)"
	@if $(GO) run $(STATICCHECK) -version >/dev/null 2>&1; then \
		$(GO) run $(STATICCHECK) $(PKGS) && (cd $(LAB) && $(GO) run $(STATICCHECK) $(PKGS)) && echo "staticcheck: no findings"; \
	else echo "staticcheck unavailable: skipped"; fi

# A short run of every fuzz target, the bench lab's too; the corpora live
# in each package's testdata/fuzz.
fuzz:
	@for mod in . $(LAB); do \
		for pkg in $$($(GO) -C $$mod list ./...); do \
			dir=$$($(GO) -C $$mod list -f '{{.Dir}}' $$pkg); \
			for t in $$(grep -ho '^func Fuzz[A-Za-z0-9_]*' $$dir/*_test.go 2>/dev/null | sed 's/func //'); do \
				echo "== $$pkg $$t"; \
				$(GO) -C $$mod test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
			done; \
		done; \
	done

# The chaos harness (docs/chaos.md): real agents under a seeded fault
# schedule and client workload, the history checked against the four
# promises. One summary line per seed; exits 1 on any violation.
chaos: build
	$(GO) run ./cmd/chaos --bin $(BIN) --duration $(CHAOS_DURATION) --gateways $(CHAOS_GATEWAYS) $(if $(CHAOS_SEEDS),--seeds $(CHAOS_SEEDS)) $(if $(CHAOS_NETNS),--netns)

# Real gossip nodes, a process each, holding 1,000,000 sessions: joiner, restart, partition (cmd/scale; <= 10 min).
SCALE_ARGS ?=
scale:
	$(GO) run ./cmd/scale $(SCALE_ARGS)

# A single development node on loopback that accepts any user (no tokens).
run: build
	./$(BIN) agent --dev --name dev1

clean:
	rm -rf bin

# A FROM-scratch container image with a static binary (deploy/Dockerfile).
image:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w $(LDFLAGS)' -o deploy/rollcall ./cmd/rollcall
	docker build -t rollcall deploy

# The compose cluster's secrets (deploy/docker-compose.yml), made once and
# kept: an HS256 key for client tokens, a gossip encryption key and an
# admin token for the HTTP API, 32 random bytes each in base64, and a TLS
# certificate for the gateways (names gw1, gw2, gw3, localhost, 127.0.0.1)
# with the CA that signed it (the CA's key is not kept). deploy/secrets/ is
# git-ignored and private to its owner (0700); the files in it are 0644 so
# the containers' non-root user (65532) can read them through their
# read-only mounts.
SECRETS := deploy/secrets
secrets: $(SECRETS)/token_secret $(SECRETS)/gossip_keyring $(SECRETS)/admin_token $(SECRETS)/tls_gateway.crt
$(SECRETS)/token_secret $(SECRETS)/gossip_keyring $(SECRETS)/admin_token:
	@mkdir -p -m 700 $(SECRETS)
	@umask 077 && head -c 32 /dev/urandom | base64 > $@.tmp && chmod 644 $@.tmp && mv $@.tmp $@
	@echo "made $@"
$(SECRETS)/tls_gateway.crt:
	@mkdir -p -m 700 $(SECRETS)
	@command -v openssl >/dev/null || { echo "make secrets: openssl is needed for the gateways' TLS certificate"; exit 1; }
	@set -e; umask 077; d=$$(mktemp -d); trap 'rm -rf "$$d"' EXIT; \
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 825 \
		-subj /CN=rollcall-compose-ca -keyout $$d/ca.key -out $$d/ca.crt 2>/dev/null; \
	openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=rollcall-gateway \
		-keyout $$d/gw.key -out $$d/gw.csr 2>/dev/null; \
	printf 'subjectAltName=DNS:gw1,DNS:gw2,DNS:gw3,DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' > $$d/ext; \
	openssl x509 -req -in $$d/gw.csr -CA $$d/ca.crt -CAkey $$d/ca.key -CAcreateserial -days 825 \
		-extfile $$d/ext -out $$d/gw.crt 2>/dev/null; \
	chmod 644 $$d/ca.crt $$d/gw.crt $$d/gw.key; \
	mv $$d/ca.crt $(SECRETS)/tls_ca.crt; mv $$d/gw.key $(SECRETS)/tls_gateway.key; mv $$d/gw.crt $@
	@echo "made $(SECRETS)/tls_ca.crt, $(SECRETS)/tls_gateway.key and $@"

# The container drills against the compose cluster (docs/chaos.md): build
# the image, start three gateways under a project name of their own, kill
# one, partition one, restart all three one by one, checking what clients
# see; the cluster is removed afterwards, also when the test fails or
# make is interrupted.
COMPOSE ?= $(shell docker compose version >/dev/null 2>&1 && echo "docker compose" || echo docker-compose)
e2e: image secrets
	@project=$${E2E_PROJECT:-rollcall-e2e-$$(date +%s)-$$$$}; start=$$(date +%s); \
	down() { $(COMPOSE) -f deploy/docker-compose.yml -p $$project down -v --remove-orphans --timeout 5 >/dev/null 2>&1; }; \
	trap 'down; exit 130' INT TERM; \
	echo "== e2e: compose project $$project ($(COMPOSE))"; \
	ROLLCALL_E2E=1 ROLLCALL_E2E_PROJECT=$$project ROLLCALL_E2E_COMPOSE="$(COMPOSE)" \
		$(GO) test -race -count=1 -v -timeout 10m ./e2e; rc=$$?; \
	down; echo "== e2e: $$(( $$(date +%s) - start ))s, exit $$rc"; exit $$rc

# The simulator against a real 32-node in-process cluster (docs/simulator.md).
# The plot goes to bin/; make calibrate PLOT=docs/sim-calibration.svg
# refreshes the tracked one.
calibrate:
	@mkdir -p $(dir $(PLOT))
	$(GO) run ./cmd/rollcall sim calibrate --runs 5 --plot $(PLOT)

# The 12-node calibration as a benchmark: CALIBRATE_RUNS runs per mode, the
# sim/real timing ratios' medians as metrics, every run's table logged.
calibrate-bench:
	$(GO) test -run '^$$' -bench Calibration -benchtime $(CALIBRATE_RUNS)x -v ./sim/calibrate

# Refresh the profile the compiler optimizes rollcall with
# (cmd/rollcall/default.pgo, used by every go build of ./cmd/rollcall): a CPU
# profile of the simulator's 10,000-node run, its heaviest workload. The
# agent's own hot paths are not in it; a production agent's profile can be
# merged in (go tool pprof -proto default.pgo agent.pprof > merged.pgo).
pgo:
	$(GO) run ./cmd/rollcall sim --nodes 10000 --changes 1000 --duration 20s --format json --cpuprofile cmd/rollcall/default.pgo > /dev/null

# Rollcall against the Redis TTL baseline (benchlab/cmd/redis-baseline) under one
# presence load (`rollcall bench`), servers on core 0 and the load on
# core 1, alternating rounds on fresh servers (docs/bench-compare.md);
# redis-server is installed with apt-get when missing and running as root.
# COMPARE_ARGS passes flags to `bench-compare run`, e.g.
# COMPARE_ARGS="--heartbeat 500ms --timeout 15s --duration 20s", or
# COMPARE_ARGS="--systems rollcall,redis,centrifuge" to add the Centrifuge
# baseline (benchlab/cmd/centrifuge-baseline) to the alternation, or
# COMPARE_ARGS="--scenario backend" for a backend tier holding 100,000
# users present (tracked sessions against Redis TTL keys), or
# COMPARE_ARGS="--raw --rates 20000,50000,max" for heartbeats alone from
# the raw generator (bin/hbgen), up to the servers' saturation. The
# baselines and bench-compare build from the bench lab's module.
COMPARE_ARGS ?=
bench-compare: build
	cd $(LAB) && $(GO) build -o ../bin/redis-baseline ./cmd/redis-baseline
	cd $(LAB) && $(GO) build -o ../bin/centrifuge-baseline ./cmd/centrifuge-baseline
	cd $(LAB) && $(GO) build -o ../bin/hbgen ./internal/hbgen
	cd $(LAB) && $(GO) build -o ../bin/bench-compare ./cmd/bench-compare
	./bin/bench-compare run $(COMPARE_ARGS)
