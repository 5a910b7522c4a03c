package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rollcall/rollcall/chaos"
	"github.com/rollcall/rollcall/node"
	"github.com/rollcall/rollcall/protocol"
)

// The agents' settings in the drills (RC_HEARTBEAT, RC_TIMEOUT of the
// compose file): short, so a silent client expires in seconds. A failed
// gateway shows within the agents' default peer lease (--peer-lease,
// 3.5s). The bounds are derived from what welcome says and that default,
// not from these.
const (
	drillHeartbeat = "1s"
	drillTimeout   = "3s"
)

// TestContainerDrills runs the drills in order on one compose cluster:
// kill, partition, rolling restart. Each starts from the state the one
// before left: every client connected and shown online everywhere.
func TestContainerDrills(t *testing.T) {
	if os.Getenv("ROLLCALL_E2E") != "1" {
		t.Skip("container drills skipped: they need Docker and the image; run `make e2e` (or ROLLCALL_E2E=1 go test ./e2e after `make image secrets`)")
	}
	ctx := t.Context()
	w := newWorld(t)
	started := time.Now()
	w.c.up(ctx)
	w.setAccess(ctx, t)
	for _, gw := range gatewayNames() {
		w.waitHealthy(ctx, t, gw)
	}
	w.checkContainers(ctx, t)

	// Two users a gateway, one device each, and one user on two gateways;
	// a watcher on each gateway subscribed to all of them.
	byGW := map[string][]*actor{}
	for i, gw := range gatewayNames() {
		for _, u := range []string{"a", "b"} {
			byGW[gw] = append(byGW[gw], w.addActor(fmt.Sprintf("user%d%s", i+1, u), "phone", false))
		}
	}
	multiPhone := w.addActor("multi", "phone", false)
	multiLaptop := w.addActor("multi", "laptop", false)
	late := w.addActor("late", "phone", false) // connects during the partition
	watchers := map[string]*actor{}
	for i, gw := range gatewayNames() {
		watchers[gw] = w.addActor(fmt.Sprintf("watch%d", i+1), "tail", true)
	}
	for _, gw := range gatewayNames() {
		for _, a := range byGW[gw] {
			must(t, a.connect(ctx, gw))
		}
	}
	// Tokens are checked (no --dev): no token, or one signed with another
	// key, is refused and the connection closed.
	forged, err := node.NewToken([]byte("not-the-compose-secret-0123456789abcdef"), "mallory", time.Hour, time.Now())
	must(t, err)
	for _, tok := range []string{"", forged} {
		_, err := dial(ctx, w.clientAddr("gw3"), w.access.tlsFor("gw3"), protocol.Request{User: "mallory", Device: "x", Token: tok}, nil)
		if err == nil || !strings.Contains(err.Error(), "auth_failed") {
			t.Errorf("hello with token %q: %v, want auth_failed", tok[:min(len(tok), 12)], err)
		}
	}
	must(t, multiPhone.connect(ctx, "gw1"))
	must(t, multiLaptop.connect(ctx, "gw2"))
	for gw, a := range watchers {
		must(t, a.connect(ctx, gw))
	}
	// The bounds, from the settings the gateways announce in welcome.
	wel := watchers["gw1"].conn().welcome
	w.bounds = chaos.DeriveBounds(time.Duration(wel.HeartbeatMS)*time.Millisecond, time.Duration(wel.TimeoutMS)*time.Millisecond, 0)
	t.Logf("settings from welcome: heartbeat %dms, timeout %dms\n%s", wel.HeartbeatMS, wel.TimeoutMS, w.bounds.Describe())
	if _, err := waitFor(ctx, time.Now(), w.bounds.Convergence, func() error { return w.checkViews(ctx, gatewayNames()...) }); err != nil {
		t.Fatalf("cluster never showed every client: %v", err)
	}
	t.Logf("cluster up, healthy and showing every client %v after compose up", time.Since(started).Round(time.Millisecond))

	if !t.Run("kill", func(t *testing.T) { w.drillKill(ctx, t, "gw1") }) {
		return
	}
	if !t.Run("partition", func(t *testing.T) { w.drillPartition(ctx, t, "gw2", byGW, late) }) {
		return
	}
	t.Run("rolling-restart", func(t *testing.T) { w.drillRollingRestart(ctx, t) })
	if bad := orderBroken(w.since(0)); len(bad) > 0 {
		t.Errorf("order promise broken (%d): %s", len(bad), strings.Join(first(bad, 10), "\n"))
	}
}

func newWorld(t *testing.T) *world {
	t.Helper()
	if out, err := exec.Command("docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		t.Fatalf("ROLLCALL_E2E=1 but Docker does not answer: %v: %s", err, out)
	}
	image := envOr("ROLLCALL_E2E_IMAGE", "rollcall")
	if out, err := exec.Command("docker", "image", "inspect", "--format", "{{.Id}}", image).CombinedOutput(); err != nil {
		t.Fatalf("no image %q (make image): %v: %s", image, err, out)
	}
	secret, err := node.ReadSecretFile("../deploy/secrets/token_secret")
	if err != nil {
		t.Fatalf("the compose cluster's token secret (make secrets): %v", err)
	}
	if _, err := os.Stat("../deploy/secrets/gossip_keyring"); err != nil {
		t.Fatalf("the compose cluster's gossip key (make secrets): %v", err)
	}
	gossipNet := os.Getenv("ROLLCALL_E2E_GOSSIP_NET")
	if gossipNet == "" {
		gossipNet = freeGossipNet(t)
	}
	c := &cluster{
		t:         t,
		compose:   composeCommand(),
		project:   envOr("ROLLCALL_E2E_PROJECT", fmt.Sprintf("rollcall-e2e-%d", os.Getpid())),
		published: os.Getenv("ROLLCALL_E2E_PUBLISHED") == "1",
		gossipNet: gossipNet,
		env: []string{"RC_IMAGE=" + image, "RC_HEARTBEAT=" + drillHeartbeat, "RC_TIMEOUT=" + drillTimeout,
			"RC_GOSSIP_NET=" + gossipNet},
	}
	t.Logf("compose project %s (%s), gossip network %s.0/24", c.project, strings.Join(c.compose, " "), gossipNet)
	return &world{c: c, secret: secret, addr: map[string]string{}, http: map[string]string{}}
}

// freeGossipNet picks the first /24 of 10.231.74.0–10.231.254.0 that no
// Docker network and no route of the host uses, so the drills run beside
// another cluster made from the same compose file.
func freeGossipNet(t *testing.T) string {
	t.Helper()
	used := ""
	if out, err := exec.Command("sh", "-c",
		`docker network inspect --format '{{range .IPAM.Config}}{{.Subnet}} {{end}}' $(docker network ls -q)`).Output(); err == nil {
		used += string(out)
	}
	if out, err := exec.Command("ip", "-4", "route").Output(); err == nil {
		used += string(out)
	}
	for n := 74; n < 255; n++ {
		if p := fmt.Sprintf("10.231.%d", n); !strings.Contains(used, p+".") {
			return p
		}
	}
	t.Fatal("no free 10.231.N.0/24 for the gossip network; set ROLLCALL_E2E_GOSSIP_NET")
	return ""
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func first(ss []string, n int) []string { return ss[:min(n, len(ss))] }

// waitHealthy waits until Docker's health check calls gw healthy (the
// image's HEALTHCHECK, `rollcall health`), then reads its addresses.
func (w *world) waitHealthy(ctx context.Context, t *testing.T, gw string) time.Duration {
	t.Helper()
	took, err := waitFor(ctx, time.Now(), 60*time.Second, func() error {
		if h := w.c.health(ctx, gw); h != "healthy" {
			return fmt.Errorf("%s is %s", gw, h)
		}
		return w.refreshAddrs(ctx, gw)
	})
	if err != nil {
		t.Fatalf("health check: %v", err)
	}
	return took
}

// setAccess reads how the cluster is to be reached: the admin token, and
// TLS if the compose file turns it on for the gateways.
func (w *world) setAccess(ctx context.Context, t *testing.T) {
	t.Helper()
	if raw, err := os.ReadFile("../deploy/secrets/admin_token"); err == nil {
		w.access.adminToken = strings.TrimSpace(string(raw))
	}
	ins, err := w.c.inspect(ctx, "gw1")
	must(t, err)
	if !slices.ContainsFunc(ins.Config.Env, func(e string) bool { return strings.HasPrefix(e, "ROLLCALL_TLS_CERT=") && e != "ROLLCALL_TLS_CERT=" }) {
		t.Log("the compose file serves plain TCP (no ROLLCALL_TLS_CERT): clients connect without TLS")
		return
	}
	ca, err := os.ReadFile("../deploy/secrets/tls_ca.crt")
	if err != nil {
		t.Fatalf("the gateways serve TLS but the CA is missing (make secrets): %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		t.Fatal("deploy/secrets/tls_ca.crt holds no certificate")
	}
	w.access.tls = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	t.Log("the gateways serve TLS: clients and HTTP requests verify them against deploy/secrets/tls_ca.crt")
}

// checkContainers checks what the image and the compose file promise: not
// root, ports published on loopback only, a health check.
func (w *world) checkContainers(ctx context.Context, t *testing.T) {
	t.Helper()
	for _, gw := range gatewayNames() {
		ins, err := w.c.inspect(ctx, gw)
		must(t, err)
		if ins.Config.User == "" || strings.HasPrefix(ins.Config.User, "0") || strings.HasPrefix(ins.Config.User, "root") {
			t.Errorf("%s runs as user %q, want non-root", gw, ins.Config.User)
		}
		if ins.State.Health == nil {
			t.Errorf("%s has no health check", gw)
		}
		for port, binds := range ins.NetworkSettings.Ports {
			for _, b := range binds {
				if b.HostIP != "127.0.0.1" {
					t.Errorf("%s publishes %s on %s, want 127.0.0.1 only", gw, port, b.HostIP)
				}
			}
		}
	}
	// Gossip is encrypted with the compose file's key.
	for _, gw := range gatewayNames() {
		out, err := w.c.docker(ctx, "logs", w.c.id(gw))
		must(t, err)
		if !strings.Contains(out, `"encrypted":true`) {
			t.Errorf("%s does not log encrypted gossip at start:\n%s", gw, first(strings.Split(out, "\n"), 5))
		}
	}
	// The host reaches the gateways on the clients network unless told to
	// use the published ports.
	if _, err := w.members(ctx, "gw1"); err != nil && !w.c.published {
		t.Fatalf("cannot reach gw1 at %s from the host (set ROLLCALL_E2E_PUBLISHED=1 to use its published ports): %v", w.httpAddr("gw1"), err)
	}
}

// downAt reports whether gateway viewer shows gateway peer's sessions
// expired (lease run out or memberlist declared it failed).
func (w *world) downAt(ctx context.Context, viewer, peer string) error {
	ms, err := w.members(ctx, viewer)
	if err != nil {
		return err
	}
	for _, m := range ms {
		if m.Name == peer {
			if m.LeaseExpired || m.State == "dead" || m.State == "left" {
				return nil
			}
			return fmt.Errorf("%s shows %s %s, sessions not expired", viewer, peer, m.State)
		}
	}
	return nil // forgotten is down too
}

// memberState reports whether gateway viewer shows peer in memberlist state
// want.
func (w *world) memberState(ctx context.Context, viewer, peer, want string) error {
	ms, err := w.members(ctx, viewer)
	if err != nil {
		return err
	}
	for _, m := range ms {
		if m.Name == peer && m.State != want {
			return fmt.Errorf("%s shows %s %s, not %s", viewer, peer, m.State, want)
		}
	}
	return nil
}

// allAlive reports whether every gateway shows every other alive with its
// sessions online.
func (w *world) allAlive(ctx context.Context) error {
	for _, v := range gatewayNames() {
		ms, err := w.members(ctx, v)
		if err != nil {
			return err
		}
		alive := 0
		for _, m := range ms {
			if m.State == "alive" && !m.LeaseExpired {
				alive++
			}
		}
		if alive != len(gatewayNames()) {
			return fmt.Errorf("%s shows %d of %d gateways alive: %+v", v, alive, len(gatewayNames()), ms)
		}
	}
	return nil
}

// actorsOn returns the connected actors on gw.
func (w *world) actorsOn(gw string) []*actor {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []*actor
	for _, a := range w.actors {
		if a.at() == gw {
			out = append(out, a)
		}
	}
	return out
}

// gatewaysOf returns the gateways each drill user has sessions on.
func (w *world) gatewaysOf() map[string][]string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string][]string{}
	for _, a := range w.actors {
		if gw := a.at(); gw != "" && !a.watcher {
			out[a.user] = append(out[a.user], gw)
		}
	}
	return out
}

// usersOnlyOn returns the drill users whose every connected session is on
// gw.
func (w *world) usersOnlyOn(gw string) map[string]bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]bool{}
	for _, a := range w.actors {
		if a.watcher {
			continue
		}
		if at := a.at(); at == gw {
			if _, seen := out[a.user]; !seen {
				out[a.user] = true
			}
		} else if at != "" {
			out[a.user] = false
		}
	}
	for u, only := range out {
		if !only {
			delete(out, u)
		}
	}
	return out
}

// gatewayAt returns the gateway a client address names: its service name
// (ROLLCALL_CLIENT_ADVERTISE in the compose file) or its address on the
// gossip network (the agent's default advertised client address).
func (w *world) gatewayAt(addr string) (string, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	for i, gw := range gatewayNames() {
		if host == gw || host == fmt.Sprintf("%s.%d", w.c.gossipNet, 11+i) {
			return gw, nil
		}
	}
	return "", fmt.Errorf("%s is no gateway of the cluster", addr)
}

func others(gw string) []string {
	var out []string
	for _, g := range gatewayNames() {
		if g != gw {
			out = append(out, g)
		}
	}
	return out
}
