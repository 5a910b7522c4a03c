package redisgw_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap/zaptest"

	"github.com/rollcall/rollcall/benchlab/baseline/redisgw"
	"github.com/rollcall/rollcall/benchlab/baseline/redistest"
	"github.com/rollcall/rollcall/client"
)

// startGateway runs a baseline gateway against redisAddr until the test
// ends.
func startGateway(t *testing.T, redisAddr, name string, timeout time.Duration) *redisgw.Gateway {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	g, err := redisgw.New(ctx, "127.0.0.1:0", redisgw.Config{Name: name, Redis: redisAddr,
		Heartbeat: timeout / 5, Timeout: timeout, Logger: zaptest.NewLogger(t)})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- g.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return g
}

// line is a raw protocol connection.
type line struct {
	t  *testing.T
	nc net.Conn
	br *bufio.Reader
}

func dialLine(t *testing.T, g *redisgw.Gateway) *line {
	t.Helper()
	nc, err := net.Dial("tcp", g.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &line{t: t, nc: nc, br: bufio.NewReader(nc)}
}

func (l *line) send(s string) {
	l.t.Helper()
	if _, err := l.nc.Write([]byte(s + "\n")); err != nil {
		l.t.Fatal(err)
	}
}

// read returns the next line as a map; the connection's end is an error.
func (l *line) read() (map[string]any, error) {
	_ = l.nc.SetReadDeadline(time.Now().Add(30 * time.Second))
	b, err := l.br.ReadBytes('\n')
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		l.t.Fatalf("gateway sent a line that is not JSON: %q", b)
	}
	return m, nil
}

func (l *line) mustRead() map[string]any {
	l.t.Helper()
	m, err := l.read()
	if err != nil {
		l.t.Fatalf("reading: %v", err)
	}
	return m
}

// readOp skips events until a line with op arrives.
func (l *line) readOp(op string) map[string]any {
	l.t.Helper()
	for {
		m := l.mustRead()
		if m["op"] == op {
			return m
		}
		if m["op"] != "event" {
			l.t.Fatalf("want %s, got %v", op, m)
		}
	}
}

func TestHelloWelcome(t *testing.T) {
	g := startGateway(t, redistest.Start(t), "rgw1", 15*time.Second)
	l := dialLine(t, g)
	l.send(`{"op":"hello","user":"alice","device":"phone","last_epoch":5,"id":"h"}`)
	w := l.mustRead()
	if w["op"] != "welcome" || w["user"] != "alice" || w["device"] != "phone" || w["gateway"] != "rgw1" ||
		w["heartbeat_ms"] != 3000.0 || w["timeout_ms"] != 15000.0 || w["protocol"] != 1.0 || w["id"] != "h" {
		t.Fatalf("welcome: %v", w)
	}
	if s, _ := w["session"].(string); !strings.HasPrefix(s, "ses_") {
		t.Errorf("session %v", w["session"])
	}
	if e, _ := w["epoch"].(float64); e < float64(time.Now().Add(-time.Hour).UnixMilli()) {
		t.Errorf("epoch %v is not floored by the clock", w["epoch"])
	}
	if _, err := time.Parse(time.RFC3339Nano, w["expires_at"].(string)); err != nil {
		t.Errorf("expires_at: %v", err)
	}
	l.send(`{"op":"hb","id":7}`)
	if hb := l.mustRead(); hb["op"] != "hb" || hb["id"] != 7.0 || hb["expires_at"] == nil {
		t.Errorf("hb reply: %v", hb)
	}

	// the project's Go client connects and keeps a session
	c, err := client.Dial(context.Background(), client.Config{Addrs: []string{g.Addr().String()}, User: "bob", Device: "laptop"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, ok := c.Session()
	if !ok || s.Epoch == 0 || s.Gateway != "rgw1" {
		t.Fatalf("client session: %+v %v", s, ok)
	}
	p, err := c.Get(context.Background(), "alice")
	if err != nil || !p.Online || len(p.Sessions) != 1 || p.Sessions[0].Device != "phone" {
		t.Fatalf("get alice: %+v %v", p, err)
	}
}

func TestEpochGrowsPastLastEpoch(t *testing.T) {
	g := startGateway(t, redistest.Start(t), "rgw1", 15*time.Second)
	l := dialLine(t, g)
	big := uint64(time.Now().Add(24 * time.Hour).UnixMilli()) // a previous epoch ahead of the clock
	l.send(`{"op":"hello","user":"alice","device":"d","last_epoch":` + jsonNum(big) + `}`)
	w := l.mustRead()
	if e := uint64(w["epoch"].(float64)); e != big+1 {
		t.Fatalf("epoch %d, want last_epoch+1 = %d", e, big+1)
	}
	l2 := dialLine(t, g)
	l2.send(`{"op":"hello","user":"alice","device":"d"}`)
	if e := uint64(l2.mustRead()["epoch"].(float64)); e != big+2 {
		t.Fatalf("a reconnect without last_epoch got epoch %d, want the stored one + 1 = %d", e, big+2)
	}
}

func jsonNum(v uint64) string { b, _ := json.Marshal(v); return string(b) }

func TestBadInput(t *testing.T) {
	g := startGateway(t, redistest.Start(t), "rgw1", 15*time.Second)
	l := dialLine(t, g)
	cases := []struct{ send, code string }{
		{`{"op":"status","status":"busy","id":1}`, "not_authenticated"},
		{`not json`, "bad_json"},
		{`{"op":"hello"}`, "bad_request"},
		{`{"op":"hello","user":"a\u0001b"}`, "bad_request"},
		{`{"op":"hello","user":"a","status":"sleepy"}`, "bad_request"},
		{`{"op":"hello","user":"a","last_epoch":9007199254740991}`, "bad_request"},
		{`{"op":"hello","user":"a","last_epoch":-1}`, "bad_request"},
		{`{"op":"hello","user":"a","id":{"x":1}}`, "bad_request"},
	}
	for _, c := range cases {
		l.send(c.send)
		m := l.mustRead()
		if m["op"] != "error" || m["code"] != c.code || m["message"] == "" {
			t.Errorf("%s: got %v, want error %s", c.send, m, c.code)
		}
	}
	l.send(`{"op":"hello","user":"alice"}`)
	if w := l.mustRead(); w["op"] != "welcome" || !strings.HasPrefix(w["device"].(string), "dev-") {
		t.Fatalf("welcome after bad hellos: %v", w)
	}
	for _, c := range []struct{ send, code string }{
		{`{"op":"nope","id":"x"}`, "unknown_op"},
		{`{"op":"status","status":"sleepy","id":2}`, "bad_request"},
		{`{"op":"sub","users":[]}`, "bad_request"},
		{`{"op":"send","to":"bob","body":1}`, "bad_request"},
		{`{"op":"hello","user":"alice"}`, "bad_request"},
	} {
		l.send(c.send)
		m := l.mustRead()
		if m["op"] != "error" || m["code"] != c.code {
			t.Errorf("%s: got %v, want error %s", c.send, m, c.code)
		}
	}
	l.send(`{"op":"status","status":"away","id":3}`)
	if m := l.mustRead(); m["op"] != "ok" || m["id"] != 3.0 {
		t.Fatalf("status after errors: %v", m)
	}
	l.send(`{"op":"get","users":["` + strings.Repeat("x", 70<<10) + `"]}`)
	if m := l.mustRead(); m["code"] != "line_too_long" {
		t.Fatalf("long line: %v", m)
	}
	if _, err := l.read(); err == nil {
		t.Fatal("connection open after line_too_long")
	}
}

// presenceClient subscribes to user over the Go client and returns its
// events.
func subscribe(t *testing.T, g *redisgw.Gateway, as string, user string) <-chan client.Event {
	t.Helper()
	c, err := client.Dial(context.Background(), client.Config{Addrs: []string{g.Addr().String()}, User: as})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	sub, err := c.Subscribe(context.Background(), user)
	if err != nil {
		t.Fatal(err)
	}
	return sub.Events()
}

// waitFor reads events until one satisfies ok.
func waitFor(t *testing.T, ch <-chan client.Event, what string, ok func(client.Event) bool) client.Event {
	t.Helper()
	timeout := time.After(60 * time.Second)
	for {
		select {
		case ev, open := <-ch:
			if !open {
				t.Fatalf("events closed waiting for %s", what)
			}
			if ok(ev) {
				return ev
			}
		case <-timeout:
			t.Fatalf("no event: %s", what)
		}
	}
}

func TestStatusAndCloseReachAnotherGateway(t *testing.T) {
	rdb := redistest.Start(t)
	g1 := startGateway(t, rdb, "rgw1", 15*time.Second)
	g2 := startGateway(t, rdb, "rgw2", 15*time.Second)
	events := subscribe(t, g2, "bob", "alice")
	waitFor(t, events, "alice offline at first", func(e client.Event) bool { return !e.Online && e.Status == "offline" })

	alice, err := client.Dial(context.Background(), client.Config{Addrs: []string{g1.Addr().String()}, User: "alice", Device: "phone"})
	if err != nil {
		t.Fatal(err)
	}
	ev := waitFor(t, events, "alice online", func(e client.Event) bool { return e.Online })
	if len(ev.Sessions) != 1 || ev.Sessions[0].Gateway != "rgw1" || ev.Sessions[0].Device != "phone" {
		t.Fatalf("online event: %+v", ev)
	}
	if err := alice.Status(context.Background(), "away"); err != nil {
		t.Fatal(err)
	}
	ev = waitFor(t, events, "alice away", func(e client.Event) bool { return e.Status == "away" })
	if !ev.Online || ev.Sessions[0].Status != "away" {
		t.Fatalf("away event: %+v", ev)
	}
	v := ev.Version
	if err := alice.Close(); err != nil {
		t.Fatal(err)
	}
	ev = waitFor(t, events, "alice offline after bye", func(e client.Event) bool { return !e.Online })
	if ev.Status != "offline" || len(ev.Sessions) != 0 || ev.Version <= v {
		t.Fatalf("offline event: %+v (previous version %d)", ev, v)
	}

	// a TCP close without bye is a clean disconnect too
	l := dialLine(t, g1)
	l.send(`{"op":"hello","user":"alice","device":"tablet"}`)
	l.readOp("welcome")
	waitFor(t, events, "alice online on the tablet", func(e client.Event) bool { return e.Online })
	l.nc.Close()
	waitFor(t, events, "alice offline after the TCP close", func(e client.Event) bool { return !e.Online })
}

func TestHeartbeatsKeepSilentExpires(t *testing.T) {
	rdb := redistest.Start(t)
	const timeout = time.Second
	g1 := startGateway(t, rdb, "rgw1", timeout)
	g2 := startGateway(t, rdb, "rgw2", timeout)
	events := subscribe(t, g2, "bob", "alice")
	waitFor(t, events, "alice offline at first", func(e client.Event) bool { return !e.Online })

	// the Go client heartbeats every heartbeat_ms (200ms)
	carol, err := client.Dial(context.Background(), client.Config{Addrs: []string{g1.Addr().String()}, User: "carol", Device: "d"})
	if err != nil {
		t.Fatal(err)
	}
	defer carol.Close()

	silent := dialLine(t, g1)
	silent.send(`{"op":"hello","user":"alice","device":"d"}`)
	silent.readOp("welcome")
	waitFor(t, events, "alice online", func(e client.Event) bool { return e.Online })
	waitFor(t, events, "alice offline after her TTL", func(e client.Event) bool { return !e.Online })
	m := silent.mustRead()
	if m["op"] != "error" || m["code"] != "expired" {
		t.Fatalf("silent client got %v, want expired", m)
	}

	// carol, who heartbeats, outlived alice's TTL several times over
	time.Sleep(3 * timeout)
	p, err := carol.Get(context.Background(), "carol")
	if err != nil || !p.Online {
		t.Fatalf("carol after 3 timeouts of heartbeats: %+v %v", p, err)
	}
	if st := g1.Stats(); st.Heartbeats < 5 || st.Pipelines == 0 {
		t.Errorf("stats %+v: heartbeats did not go through pipelines", st)
	}
}

func TestOlderEpochNeverOverwritesNewer(t *testing.T) {
	addr := redistest.Start(t)
	g1 := startGateway(t, addr, "rgw1", 15*time.Second)
	g2 := startGateway(t, addr, "rgw2", 15*time.Second)
	old := dialLine(t, g1)
	old.send(`{"op":"hello","user":"alice","device":"phone"}`)
	oldEpoch := old.readOp("welcome")["epoch"].(float64)
	newer := dialLine(t, g2)
	newer.send(`{"op":"hello","user":"alice","device":"phone","status":"busy"}`)
	newEpoch := newer.readOp("welcome")["epoch"].(float64)
	if newEpoch <= oldEpoch {
		t.Fatalf("second connection's epoch %v not above the first's %v", newEpoch, oldEpoch)
	}
	// the older connection's write arrives late: refused, and the older
	// connection learns it is superseded
	old.send(`{"op":"status","status":"away","id":1}`)
	var m map[string]any
	for m = old.mustRead(); m["op"] == "event"; m = old.mustRead() {
	}
	if m["op"] != "error" || m["code"] != "superseded" {
		t.Fatalf("older connection's status: %v, want superseded", m)
	}
	if _, err := old.read(); err == nil {
		t.Fatal("superseded connection still open")
	}
	// its close deleted nothing: the newer session stands, with its status
	rc := redis.NewClient(&redis.Options{Addr: addr})
	defer rc.Close()
	v, err := rc.Get(context.Background(), "rc:s:alice\x1fphone").Result()
	if err != nil {
		t.Fatal(err)
	}
	if want := jsonNum(uint64(newEpoch)) + "\x1fbusy\x1f"; !strings.HasPrefix(v, want) {
		t.Fatalf("stored %q, want the newer epoch's %q…", v, want)
	}
	newer.send(`{"op":"get","users":["alice"],"id":2}`)
	p := newer.readOp("presence")
	us := p["users"].([]any)[0].(map[string]any)
	if us["online"] != true || us["sessions"].([]any)[0].(map[string]any)["epoch"] != newEpoch {
		t.Fatalf("presence after the late write: %v", p)
	}
}

func TestManyConcurrentSessions(t *testing.T) {
	addr := redistest.Start(t)
	g := startGateway(t, addr, "rgw1", 15*time.Second)
	var wg sync.WaitGroup
	const n = 50
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			nc, err := net.Dial("tcp", g.Addr().String())
			if err != nil {
				errs <- err
				return
			}
			defer nc.Close()
			br := bufio.NewReader(nc)
			u := "u" + jsonNum(uint64(i))
			nc.Write([]byte(`{"op":"hello","user":"` + u + `"}` + "\n"))
			if _, err := br.ReadBytes('\n'); err != nil {
				errs <- err
				return
			}
			for range 20 {
				nc.Write([]byte(`{"op":"hb"}` + "\n"))
			}
			nc.Write([]byte(`{"op":"hb","id":1}` + "\n"))
			b, err := br.ReadBytes('\n')
			if err != nil || !strings.Contains(string(b), `"op":"hb"`) {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if st := g.Stats(); st.Heartbeats < n {
		t.Errorf("%d heartbeat writes for %d sessions", st.Heartbeats, n)
	}
}

func TestLongLineSubscribesAll(t *testing.T) {
	g := startGateway(t, redistest.Start(t), "rgw1", 15*time.Second)
	l := dialLine(t, g)
	l.send(`{"op":"hello","user":"bob"}`)
	l.readOp("welcome")
	users := make([]string, 1000)
	for i := range users {
		users[i] = `"user-with-a-longish-name-` + jsonNum(uint64(i)) + `"`
	}
	l.send(`{"op":"sub","id":1,"users":[` + strings.Join(users, ",") + `]}`) // ~33 KB
	if m := l.mustRead(); m["op"] != "ok" || m["id"] != 1.0 {
		t.Fatalf("sub reply: %v", m)
	}
	seen := map[string]bool{}
	for len(seen) < len(users) {
		m := l.mustRead()
		if m["op"] != "event" || m["online"] != false {
			t.Fatalf("initial event: %v", m)
		}
		seen[m["user"].(string)] = true
	}
}
