package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rollcall/rollcall/chaos"
	"github.com/rollcall/rollcall/node"
)

// The agents' settings in the drills (RC_HEARTBEAT, RC_TIMEOUT of the
// compose file): short, so a lease runs out in seconds. The bounds are
// derived from what welcome says, not from these.
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
		_, err := dial(ctx, w.clientAddr("gw3"), w.access.tlsFor("gw3"), hello{User: "mallory", Device: "x", Token: tok}, nil)
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
		out, err := w.c.composeRun(ctx, "logs", "--no-color", gw)
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

// drillKill: docker kill one gateway. Its sessions must be shown offline
// (expired) on the others within the crash bound, no other user may be
// shown offline, and once it is started again it serves its clients again.
func (w *world) drillKill(ctx context.Context, t *testing.T, victim string) {
	survivors := others(victim)
	lost := w.usersOnlyOn(victim)
	victims := w.actorsOn(victim)
	m := w.mark()
	id := w.c.id(victim)
	t0 := time.Now()
	if _, err := w.c.docker(ctx, "kill", id); err != nil {
		t.Fatal(err)
	}
	for _, a := range victims {
		<-a.conn().done
		if code := a.conn().end(); code != "eof" {
			t.Errorf("%s/%s on the killed gateway: connection ended %q, want a plain close", a.user, a.device, code)
		}
	}
	bound := w.bounds.CrashExpiry
	took, err := waitFor(ctx, t0, bound+5*time.Second, func() error { return w.checkViews(ctx, survivors...) })
	if err != nil {
		t.Fatalf("after docker kill %s: %v", victim, err)
	}
	// When each watcher saw each of the victim's users offline: the
	// crash-detection time.
	var worst time.Duration
	seen := firstOffline(w.since(m))
	for _, s := range survivors {
		for u := range lost {
			at, ok := seen[[2]string{s, u}]
			if !ok {
				t.Errorf("the watcher on %s never saw %s offline", s, u)
				continue
			}
			worst = max(worst, at.Sub(t0))
		}
		if err := w.downAt(ctx, s, victim); err != nil {
			t.Errorf("after the kill: %v", err)
		}
	}
	// The bound is checked on the watchers' event times; the views are
	// polled, so they are only required to agree in the end.
	t.Logf("docker kill %s: its users offline at the survivors' watchers after %v at most (views polled correct after %v); crash bound %v",
		victim, worst.Round(time.Millisecond), took.Round(time.Millisecond), bound)
	if worst > bound {
		t.Errorf("crash detection took %v, over the crash bound %v", worst, bound)
	}
	if bad := offlines(w.since(m), func(o observation) bool { return lost[o.p.User] }); len(bad) > 0 {
		t.Errorf("users still connected to a live gateway shown offline: %s", strings.Join(first(bad, 10), "; "))
	}

	// Start it again: the new incarnation rejoins, its clients come back.
	if _, err := w.c.docker(ctx, "start", id); err != nil {
		t.Fatal(err)
	}
	w.waitHealthy(ctx, t, victim)
	for _, a := range victims {
		must(t, a.connectRetry(ctx, victim))
	}
	if _, err := waitFor(ctx, time.Now(), w.bounds.Convergence, func() error {
		if err := w.allAlive(ctx); err != nil {
			return err
		}
		return w.checkViews(ctx, gatewayNames()...)
	}); err != nil {
		t.Fatalf("after %s restarted: %v", victim, err)
	}
}

// drillPartition: docker network disconnect one gateway from the gossip
// network (its clients stay connected on the clients network). While cut
// off, each side shows the other side's sessions expired, and changes on
// each side are seen on that side; once connected again every gateway
// shows every session that stayed connected and every change made during
// the cut.
func (w *world) drillPartition(ctx context.Context, t *testing.T, cut string, byGW map[string][]*actor, late *actor) {
	id := w.c.id(cut)
	ins, err := w.c.inspect(ctx, cut)
	must(t, err)
	gossipNet := networkName(ins, "gossip")
	ip := ins.NetworkSettings.Networks[gossipNet].IPAddress
	if gossipNet == "" || ip == "" {
		t.Fatalf("%s is on no gossip network: %+v", cut, ins.NetworkSettings.Networks)
	}
	sides := w.gatewaysOf()
	m := w.mark()
	t0 := time.Now()
	if _, err := w.c.docker(ctx, "network", "disconnect", gossipNet, id); err != nil {
		t.Fatal(err)
	}
	reconnected := false
	defer func() {
		if !reconnected { // leave the cluster whole for the next drill or the logs
			w.c.docker(context.Background(), "network", "connect", "--ip", ip, gossipNet, id)
		}
	}()
	w.mu.Lock()
	w.cut = cut
	w.mu.Unlock()
	bound := w.bounds.CrashExpiry
	took, err := waitFor(ctx, t0, bound+5*time.Second, func() error {
		for _, g := range others(cut) {
			if err := w.downAt(ctx, g, cut); err != nil {
				return err
			}
			if err := w.downAt(ctx, cut, g); err != nil {
				return err
			}
		}
		return w.checkViews(ctx, gatewayNames()...)
	})
	if err != nil {
		t.Fatalf("cut off %s: %v", cut, err)
	}
	// When each watcher saw each user with no session on its side of the
	// cut offline.
	var worst time.Duration
	seen := firstOffline(w.since(m))
	for _, g := range gatewayNames() {
		for u, gws := range sides {
			if slices.ContainsFunc(gws, func(x string) bool { return (x == cut) == (g == cut) }) {
				continue // has a session on g's side
			}
			at, ok := seen[[2]string{g, u}]
			if !ok {
				t.Errorf("the watcher on %s never saw %s offline", g, u)
				continue
			}
			worst = max(worst, at.Sub(t0))
		}
	}
	t.Logf("network disconnect %s: the other side's users offline at every watcher after %v at most (views and members polled correct after %v); bound: the lease, %v",
		cut, worst.Round(time.Millisecond), took.Round(time.Millisecond), bound)
	if worst > bound {
		t.Errorf("the cut showed after %v, over the bound %v", worst, bound)
	}

	// Hold the cut until memberlist, too, has given up on the other side
	// (declared it dead), so the heal needs the reconnect round rather than
	// the next probe: the longer way back.
	dead, err := waitFor(ctx, t0, 30*time.Second, func() error {
		for _, g := range others(cut) {
			if err := w.memberState(ctx, g, cut, "dead"); err != nil {
				return err
			}
			if err := w.memberState(ctx, cut, g, "dead"); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("memberlist never declared the cut-off side dead: %v", err)
	}
	t.Logf("memberlist declared both sides dead %v after the cut", dead.Round(time.Millisecond))

	// Changes on both sides while cut off.
	must(t, byGW["gw1"][0].setStatus("away"))
	must(t, byGW["gw1"][1].setStatus("busy"))
	must(t, byGW[cut][0].setStatus("away"))
	must(t, byGW["gw3"][1].sayBye())
	must(t, late.connect(ctx, cut))
	sides[late.user] = []string{cut}
	tc := time.Now()
	if _, err := waitFor(ctx, tc, w.bounds.Propagation, func() error { return w.checkViews(ctx, gatewayNames()...) }); err != nil {
		t.Fatalf("changes during the cut: %v", err)
	}

	th := time.Now()
	if _, err := w.c.docker(ctx, "network", "connect", "--ip", ip, gossipNet, id); err != nil {
		t.Fatal(err)
	}
	reconnected = true
	w.mu.Lock()
	w.cut = ""
	w.mu.Unlock()
	heal := w.bounds.Rejoin
	took, err = waitFor(ctx, th, heal+5*time.Second, func() error {
		if err := w.allAlive(ctx); err != nil {
			return err
		}
		return w.checkViews(ctx, gatewayNames()...)
	})
	if err != nil {
		t.Fatalf("after the heal: %v", err)
	}
	t.Logf("network connect %s: healed, every session and change shown everywhere after %v (bound: reconnect round + recovery, %v)",
		cut, took.Round(time.Millisecond), heal)
	if took > heal {
		t.Errorf("the heal took %v, over the bound %v", took, heal)
	}
	// The watchers' last events agree with the views: nothing was lost on
	// the event streams either.
	if err := w.checkWatchers(); err != nil {
		t.Error(err)
	}
	// Who may have been shown offline: a user with no session on the
	// watcher's side of the cut, and the one who said bye.
	bye := byGW["gw3"][1].user
	if bad := offlines(w.since(m), func(o observation) bool {
		if o.p.User == bye {
			return true
		}
		for _, g := range sides[o.p.User] {
			if (g == cut) == (o.gateway == cut) {
				return false
			}
		}
		return true
	}); len(bad) > 0 {
		t.Errorf("users connected on the watcher's side of the cut shown offline: %s", strings.Join(first(bad, 10), "; "))
	}
	// The user who said bye comes back for the next drill.
	must(t, byGW["gw3"][1].connect(ctx, "gw3"))
	if _, err := waitFor(ctx, time.Now(), w.bounds.Propagation, func() error { return w.checkViews(ctx, gatewayNames()...) }); err != nil {
		t.Fatal(err)
	}
}

// checkWatchers compares each watcher's latest event per user with what
// its gateway must show.
func (w *world) checkWatchers() error {
	latest := map[[2]string]node.Presence{}
	streamOf := map[string]int{}
	for _, o := range w.since(0) {
		if o.stream >= streamOf[o.watcher] {
			streamOf[o.watcher] = o.stream
			latest[[2]string{o.watcher, o.p.User}] = o.p
		}
	}
	var bad []string
	w.mu.Lock()
	var ws []*actor
	for _, a := range w.actors {
		if a.watcher {
			ws = append(ws, a)
		}
	}
	w.mu.Unlock()
	for _, a := range ws {
		gw := a.at()
		for _, u := range w.drillUsers() {
			wantS, wantSt := w.expected(gw, u)
			gotS, gotSt := shown(latest[[2]string{a.user, u}])
			if gotSt != wantSt || strings.Join(gotS, ",") != strings.Join(wantS, ",") {
				bad = append(bad, fmt.Sprintf("%s on %s: %s %s %q, want %s %q", a.user, gw, u, gotSt, gotS, wantSt, wantS))
			}
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("watchers' latest events differ: %s", strings.Join(bad, "; "))
	}
	return nil
}

// drainGraceEnv turns on the check that waits on the lame-duck drain grace
// whatever the gateways say: a user whose every session was on a draining
// gateway, and who reconnects elsewhere at once, is never shown offline. A
// gateway with the lame-duck drain lists the other gateways in
// shutting_down, and the check is on whenever one does. A gateway without
// it writes a drained session disconnected before it tells the client
// shutting_down, so subscribers elsewhere see the user offline for the
// moment between the two; there those flaps are counted and logged, not
// failed.
const drainGraceEnv = "ROLLCALL_E2E_DRAIN_GRACE"

// reconnectDelay is how long a client of a draining gateway waits after
// shutting_down before it says hello to the next gateway.
const reconnectDelay = 200 * time.Millisecond

// drillRollingRestart: docker restart each gateway in turn, waiting for
// its health check and for it to show everyone before the next. Clients of
// the restarted gateway get shutting_down and reconnect at once to the
// next gateway with last_epoch; nobody is shown offline meanwhile.
func (w *world) drillRollingRestart(ctx context.Context, t *testing.T) {
	m := w.mark()
	type step struct {
		gw         string
		from, to   time.Time
		drainedAll map[string]bool // users whose every session was on gw
	}
	var steps []step
	names := gatewayNames()
	var handoverMu sync.Mutex
	handover := false // some shutting_down listed the other gateways
	for i, gw := range names {
		target := names[(i+1)%len(names)]
		movers := w.actorsOn(gw)
		st := step{gw: gw, from: time.Now(), drainedAll: w.usersOnlyOn(gw)}
		id := w.c.id(gw)
		var wg sync.WaitGroup
		errs := make([]error, len(movers))
		dest := make([]string, len(movers))
		for j, a := range movers {
			c, old := a.conn(), a.lastEpoch()
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-c.done
				if code := c.end(); code != string(node.CodeShuttingDown) {
					errs[j] = fmt.Errorf("%s/%s on %s: connection ended %q, want %s", a.user, a.device, gw, code, node.CodeShuttingDown)
				}
				target := target
				if offered := c.gatewaysOffered(); len(offered) > 0 {
					handoverMu.Lock()
					handover = true
					handoverMu.Unlock()
					// Go where the gateway says, as a client would.
					var err error
					if target, err = w.gatewayAt(offered[0]); err != nil || target == gw {
						errs[j] = errors.Join(errs[j], fmt.Errorf("%s/%s: shutting_down from %s offered %q: %q, %v", a.user, a.device, gw, offered, target, err))
						return
					}
				}
				// A real client's reconnect takes a round trip or two
				// over a WAN, or a backoff: well inside the drain grace.
				time.Sleep(reconnectDelay)
				rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				if err := a.connectRetry(rctx, target); err != nil {
					errs[j] = errors.Join(errs[j], err)
					return
				}
				dest[j] = target
				if e := a.lastEpoch(); e <= old {
					errs[j] = errors.Join(errs[j], fmt.Errorf("%s/%s: epoch %d on %s after %d", a.user, a.device, e, target, old))
				}
			}()
		}
		t0 := time.Now()
		if _, err := w.c.docker(ctx, "restart", id); err != nil {
			t.Fatal(err)
		}
		restarted := time.Since(t0)
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Error(err)
		}
		healthy := w.waitHealthy(ctx, t, gw)
		synced, err := waitFor(ctx, time.Now(), w.bounds.Convergence, func() error {
			if err := w.allAlive(ctx); err != nil {
				return err
			}
			return w.checkViews(ctx, names...)
		})
		if err != nil {
			t.Fatalf("after restarting %s: %v", gw, err)
		}
		st.to = time.Now()
		steps = append(steps, st)
		moved := map[string]int{}
		for _, d := range dest {
			moved[d]++
		}
		t.Logf("docker restart %s: %v; healthy %v later, every view correct %v after that; its %d clients moved: %v",
			gw, restarted.Round(time.Millisecond), healthy.Round(time.Millisecond), synced.Round(time.Millisecond), len(movers), moved)
	}
	if err := w.checkWatchers(); err != nil {
		t.Error(err)
	}
	var drainFlaps []string
	bad := offlines(w.since(m), func(o observation) bool {
		for _, st := range steps {
			if !o.at.Before(st.from) && !o.at.After(st.to) && st.drainedAll[o.p.User] {
				drainFlaps = append(drainFlaps, fmt.Sprintf("%s (watching on %s) saw %s offline at %s while %s drained",
					o.watcher, o.gateway, o.p.User, o.at.Format("15:04:05.000"), st.gw))
				return true
			}
		}
		return false
	})
	if len(bad) > 0 {
		t.Errorf("users with a session on a running gateway shown offline during the rolling restart: %s", strings.Join(first(bad, 10), "; "))
	}
	if len(drainFlaps) > 0 {
		msg := fmt.Sprintf("%d offline flaps of users whose gateway drained and who reconnected at once elsewhere: %s",
			len(drainFlaps), strings.Join(first(drainFlaps, 6), "; "))
		if handover || os.Getenv(drainGraceEnv) == "1" {
			t.Error(msg)
		} else {
			t.Logf("%s\n(not failed: this check waits on the lame-duck drain grace, which these gateways do not have: their shutting_down lists no other gateways; set %s=1 to enforce it)", msg, drainGraceEnv)
		}
	}
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
