#!/bin/sh
# bench-saturation.sh [HEARTBEAT_INTERVALS] [ROUNDS]
#
# Heartbeats per server core-second as the rate rises, Rollcall against the
# Redis TTL baseline (benchlab/baseline/redisgw), up to saturation. One server
# system at a time, pinned to core 0 (one Rollcall agent; or one baseline
# gateway plus redis-server); two raw heartbeat generators
# (benchlab/internal/hbgen: a hello, then plain heartbeats, nothing else) of
# PER sessions each (5,000; a process holds at most 20,000 files, so 9,500
# is the most one server can take from both), pinned to core 1. A raw
# generator is used so the load core is not what saturates first. Systems alternate within each
# rate; fresh processes every run. Prints one line per run: system,
# interval, heartbeats/s answered by the generators' sends, server
# core-seconds, heartbeats per core-second, server core utilisation.
#
# ROLLCALL_ARGS adds agent flags. VARIANTS runs the agent again in each
# round, between the default agent and the baseline, once per
# space-separated NAME=FLAGS (flags comma-separated), e.g.
# VARIANTS="epoll=--io-uring=false".
#
# Needs: make build;
# go -C benchlab build -o ../bin/redis-baseline ./cmd/redis-baseline;
# go -C benchlab build -o ../bin/hbgen ./internal/hbgen; redis-server.
set -eu
cd "$(dirname "$0")/.."
intervals=${1:-"200ms 50ms"}
rounds=${2:-3}
per=${PER:-5000}
window=20
port=27600
tmp=$(mktemp -d)
pids=
cleanup() { for p in $pids; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
cpu() { s=0; for p in "$@"; do s=$((s + $(awk '{print $14 + $15}' /proc/$p/stat))); done; echo $s; }
hz=$(getconf CLK_TCK)
sent() { awk '/^heartbeats/ {n=$2} END {print n+0}' "$1"; }
start_gens() { # addr interval
	taskset -c 1 bin/hbgen -addr "$1" -n $per -src 127.0.1.1 -ips 100 -user a -hb "$2" -report 1s >"$tmp/g1" 2>&1 &
	g1=$!
	taskset -c 1 bin/hbgen -addr "$1" -n $per -src 127.0.2.1 -ips 100 -user b -hb "$2" -report 1s >"$tmp/g2" 2>&1 &
	g2=$!
	pids="$pids $g1 $g2"
	i=0
	until grep -q ready "$tmp/g1" && grep -q ready "$tmp/g2"; do
		i=$((i + 1)); [ $i -lt 120 ] || { cat "$tmp/g1" "$tmp/g2" >&2; exit 1; }
		sleep 1
	done
}
measure() { # system interval server-pids...
	sys=$1 iv=$2; shift 2
	sleep 5
	s0=$(sent "$tmp/g1"); t0=$(sent "$tmp/g2"); c0=$(cpu "$@")
	sleep $window
	s1=$(sent "$tmp/g1"); t1=$(sent "$tmp/g2"); c1=$(cpu "$@")
	awk -v sys="$sys" -v iv="$iv" -v hb=$((s1 - s0 + t1 - t0)) -v ticks=$((c1 - c0)) -v hz="$hz" -v w=$window \
		'BEGIN { cs = ticks / hz; printf "%-8s %-6s %9.0f hb/s %7.2f core-s %9.0f hb/core-s %5.2f cores\n", sys, iv, hb / w, cs, hb / cs, cs / w }'
	kill $g1 $g2 "$@" 2>/dev/null || true
	wait $g1 $g2 "$@" 2>/dev/null || true
	pids=
}
for iv in $intervals; do
	for r in $(seq "$rounds"); do
		port=$((port + 10))
		taskset -c 0 bin/rollcall agent --dev --name sat --client-addr 127.0.0.1:$port --http-addr "" --gossip-addr "" \
			--max-connections-per-ip 1000 --request-rate -1 --log-level error ${ROLLCALL_ARGS:-} &
		a=$!; pids="$a"; sleep 1
		start_gens 127.0.0.1:$port "$iv"
		measure rollcall "$iv" $a

		for v in ${VARIANTS:-}; do
			port=$((port + 10))
			taskset -c 0 bin/rollcall agent --dev --name sat --client-addr 127.0.0.1:$port --http-addr "" --gossip-addr "" \
				--max-connections-per-ip 1000 --request-rate -1 --log-level error ${ROLLCALL_ARGS:-} $(echo "${v#*=}" | tr , ' ') &
			a=$!; pids="$a"; sleep 1
			start_gens 127.0.0.1:$port "$iv"
			measure "${v%%=*}" "$iv" $a
		done

		port=$((port + 10))
		taskset -c 0 redis-server --port $((port + 1)) --save '' --appendonly no --notify-keyspace-events Ex >/dev/null &
		rs=$!; sleep 0.5
		taskset -c 0 bin/redis-baseline -addr 127.0.0.1:$port -redis 127.0.0.1:$((port + 1)) -timeout 15s -heartbeat "$iv" 2>/dev/null &
		b=$!; pids="$rs $b"; sleep 1
		start_gens 127.0.0.1:$port "$iv"
		measure redis "$iv" $b $rs
	done
done
