package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rollcall/rollcall/internal/testcluster"
	"github.com/rollcall/rollcall/internal/testkit"
	"github.com/rollcall/rollcall/node"
	"github.com/rollcall/rollcall/webhook"
)

// hookReceiver is a webhook endpoint that verifies each request's
// signature and records what it accepted; with failHalf it answers 500
// to every other request, before looking at it.
type hookReceiver struct {
	t        *testing.T
	key      []byte
	failHalf bool

	mu       sync.Mutex
	requests int
	accepted []hookDelivery
}

type hookDelivery struct {
	id, from string
	body     webhook.Body
}

func newHookReceiver(t *testing.T, key []byte, failHalf bool) (*hookReceiver, string) {
	r := &hookReceiver{t: t, key: key, failHalf: failHalf}
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return r, srv.URL
}

func (r *hookReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests++
	if r.failHalf && r.requests%2 == 1 {
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	if err := webhook.Verify(req.Header, body, [][]byte{r.key}, time.Now(), 5*time.Minute); err != nil {
		r.t.Errorf("webhook %s: %v", req.Header.Get(webhook.HeaderID), err)
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	var b webhook.Body
	if err := json.Unmarshal(body, &b); err != nil {
		r.t.Errorf("webhook body %s: %v", body, err)
	}
	r.accepted = append(r.accepted, hookDelivery{id: req.Header.Get(webhook.HeaderID), from: req.UserAgent(), body: b})
	w.WriteHeader(http.StatusNoContent)
}

// of returns the accepted deliveries of user's events of type typ.
func (r *hookReceiver) of(user, typ string) []hookDelivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []hookDelivery
	for _, d := range r.accepted {
		if d.body.Data.User == user && d.body.Type == typ {
			out = append(out, d)
		}
	}
	return out
}

// once waits until user's event of type typ has been accepted, and checks
// it was accepted exactly once (one delivery, so one id).
func (r *hookReceiver) once(user, typ string) webhook.Body {
	r.t.Helper()
	testkit.WaitFor(r.t, 30*time.Second, user+" "+typ, func() bool { return len(r.of(user, typ)) > 0 })
	got := r.of(user, typ)
	if len(got) != 1 {
		r.t.Fatalf("%s %s delivered %d times: %+v", user, typ, len(got), got)
	}
	return got[0].body
}

// TestWebhooksAcrossGateways: users on three gateways joined by gossip.
// Each online, status change and clean disconnect reaches the receiver,
// signed, exactly once, from the user's one notifier; when a gateway is
// killed (no leave, no last writes), a survivor announces its users
// offline with reason gateway_failed. With a receiver that fails every
// other request, nothing is lost.
func TestWebhooksAcrossGateways(t *testing.T) {
	for _, failHalf := range []bool{false, true} {
		t.Run(fmt.Sprintf("failHalf=%v", failHalf), func(t *testing.T) { testWebhooksAcrossGateways(t, failHalf) })
	}
}

func testWebhooksAcrossGateways(t *testing.T, failHalf bool) {
	key := webhook.NewSecret()
	rcv, url := newHookReceiver(t, key, failHalf)
	gs := testcluster.Start(t, 3, testcluster.Options{Timeout: 30 * time.Second, Heartbeat: time.Second,
		Configure: func(c *node.Config) {
			c.Webhook.URLs = []string{url}
			c.Webhook.Secrets = [][]byte{key}
			c.Webhook.Handoff = time.Second
			c.Webhook.MinBackoff, c.Webhook.MaxBackoff = 10*time.Millisecond, 100*time.Millisecond
		}})
	// Every gateway has caught up and sees the same three members, with
	// no earlier view of the start-up still counting.
	testkit.WaitFor(t, 30*time.Second, "the gateways' webhook views to settle", func() bool {
		for _, g := range gs {
			if st := g.GW.WebhookStats(); !st.Ready || !st.Settled {
				return false
			}
		}
		return true
	})

	// Four users on each gateway: user i on g(i%3).
	const users = 12
	clients := make([]*testkit.LineClient, users)
	for i := range users {
		c := testkit.DialLine(t, gs[i%3].GW.ClientAddr().String(), fmt.Sprintf("u%d", i), "phone", nil)
		c.Heartbeat(time.Second)
		clients[i] = c
	}
	notifiers := map[string]bool{}
	for i := range users {
		b := rcv.once(fmt.Sprintf("u%d", i), "user.online")
		if b.Data.Status != "available" || len(b.Data.Sessions) != 1 || b.Data.Sessions[0].Gateway != fmt.Sprintf("g%d", i%3) {
			t.Fatalf("online of u%d: %+v", i, b)
		}
		notifiers[rcv.of(fmt.Sprintf("u%d", i), "user.online")[0].from] = true
	}
	if len(notifiers) < 2 {
		t.Errorf("one gateway announced all twelve users: %v", notifiers)
	}

	// u0 (on g0) goes away: user.status.
	clients[0].Send(map[string]any{"op": "status", "status": "away", "id": 1})
	if b := rcv.once("u0", "user.status"); b.Data.Status != "away" {
		t.Fatalf("status of u0: %+v", b)
	}
	// The users on g0 say bye: user.offline, disconnected.
	for i := 0; i < users; i += 3 {
		clients[i].Send(map[string]any{"op": "bye"})
	}
	for i := 0; i < users; i += 3 {
		if b := rcv.once(fmt.Sprintf("u%d", i), "user.offline"); b.Data.Reason != "disconnected" || b.Data.Sessions[0].Gateway != "g0" {
			t.Fatalf("offline of u%d: %+v", i, b)
		}
	}

	// With every queue empty, nothing was delivered twice.
	testkit.WaitFor(t, 30*time.Second, "the webhook queues to empty", func() bool {
		for _, g := range gs {
			if g.GW.WebhookStats().Queued != 0 {
				return false
			}
		}
		return true
	})
	for i := range users {
		for _, typ := range []string{"user.online", "user.status", "user.offline"} {
			if got := rcv.of(fmt.Sprintf("u%d", i), typ); len(got) > 1 {
				t.Fatalf("u%d %s delivered %d times", i, typ, len(got))
			}
		}
	}

	// g1 is killed: its users go offline, gateway_failed, announced by
	// g0 or g2.
	gs[1].Kill()
	for i := 1; i < users; i += 3 {
		u := fmt.Sprintf("u%d", i)
		testkit.WaitFor(t, 30*time.Second, u+" offline after g1's kill", func() bool { return len(rcv.of(u, "user.offline")) > 0 })
		ids := map[string]bool{}
		for _, d := range rcv.of(u, "user.offline") {
			ids[d.id] = true
			if d.body.Data.Reason != "gateway_failed" || strings.Contains(d.from, "gateway g1") {
				t.Fatalf("offline of %s: %+v from %s", u, d.body, d.from)
			}
		}
		if len(ids) != 1 {
			t.Fatalf("offline of %s under %d ids", u, len(ids))
		}
	}
	// The users of g2 were never announced offline, and nothing was
	// announced twice under two ids.
	for i := 2; i < users; i += 3 {
		if got := rcv.of(fmt.Sprintf("u%d", i), "user.offline"); len(got) != 0 {
			t.Fatalf("u%d announced offline: %+v", i, got)
		}
	}
	for _, g := range []*testcluster.Gateway{gs[0], gs[2]} {
		if st := g.GW.WebhookStats(); st.Dropped != 0 || st.Failed != 0 {
			t.Errorf("%s: %+v", g.GW.Name(), st)
		}
	}
}

// TestWebhooksDeliveredBeforeDrainReturns: a gateway that drains has sent
// its users' user.offline by the time Drain returns, so the agent's exit
// loses none.
func TestWebhooksDeliveredBeforeDrainReturns(t *testing.T) {
	key := webhook.NewSecret()
	rcv, url := newHookReceiver(t, key, true)
	cfg := node.DefaultConfig()
	cfg.Name, cfg.ClientAddr, cfg.Dev = "solo", "127.0.0.1:0", true
	// The online's flush opens a window of a minute: the notifier would
	// flush the drain's disconnect after the drain, not before.
	cfg.EventCoalesce = time.Minute
	cfg.Webhook.URLs, cfg.Webhook.Secrets = []string{url}, [][]byte{key}
	cfg.Webhook.MinBackoff, cfg.Webhook.MaxBackoff = 10*time.Millisecond, 100*time.Millisecond
	n, err := node.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	testkit.DialLine(t, n.ClientAddr().String(), "alice", "phone", nil)
	rcv.once("alice", "user.online")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := n.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	got := rcv.of("alice", "user.offline")
	if len(got) != 1 || got[0].body.Data.Reason != "disconnected" {
		t.Fatalf("after the drain: %+v", got)
	}
	if st := n.WebhookStats(); st.Sent != 2 || st.Queued != 0 || st.Retried == 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestWebhooksAcrossRegions: two regions, each a cluster with its own
// notifiers, bridged. A change is announced once, by the region where it
// was made: each region's notifier of the user decides the same event,
// and the one of the other region counts it skipped
// (rollcall_webhook_other_region_total) instead of sending it.
func TestWebhooksAcrossRegions(t *testing.T) {
	key := webhook.NewSecret()
	rcv, url := newHookReceiver(t, key, false)
	gs := testcluster.StartRegions(t, []string{"eu", "us"}, 2, 1, testcluster.Options{Timeout: 30 * time.Second, Heartbeat: time.Second,
		Configure: func(c *node.Config) {
			c.Webhook.URLs = []string{url}
			c.Webhook.Secrets = [][]byte{key}
			c.Webhook.Handoff = time.Second
			c.Webhook.MinBackoff, c.Webhook.MaxBackoff = 10*time.Millisecond, 100*time.Millisecond
		}})
	testkit.WaitFor(t, 30*time.Second, "the gateways' webhook views to settle", func() bool {
		for _, g := range gs {
			if st := g.GW.WebhookStats(); !st.Ready || !st.Settled {
				return false
			}
		}
		return true
	})
	region := func(g *testcluster.Gateway) string { return g.GW.Name()[:2] }
	skipped := func(reg string) uint64 {
		var n uint64
		for _, g := range gs {
			if region(g) == reg {
				n += g.GW.WebhookStats().OtherRegion
			}
		}
		return n
	}
	// gs: eu0 (bridge), eu1, us0 (bridge), us1. Users on the gateways
	// that are not bridges, and on a bridge.
	on := map[string]*testcluster.Gateway{"alice": gs[1], "bob": gs[3], "carol": gs[0]}
	clients := map[string]*testkit.LineClient{}
	for _, u := range []string{"alice", "bob", "carol"} {
		c := testkit.DialLine(t, on[u].GW.ClientAddr().String(), u, "phone", nil)
		c.Heartbeat(time.Second)
		clients[u] = c
	}
	// Each online announced by its own region, and seen skipped by the
	// other's notifier: two skipped in us (alice, carol), one in eu (bob).
	for _, u := range []string{"alice", "bob", "carol"} {
		d := rcv.of(u, "user.online")
		testkit.WaitFor(t, 30*time.Second, u+" online announced", func() bool { d = rcv.of(u, "user.online"); return len(d) > 0 })
		if want := "gateway " + region(on[u]); !strings.Contains(d[0].from, want) {
			t.Errorf("%s's online sent by %q, want a gateway of %s", u, d[0].from, region(on[u]))
		}
	}
	testkit.WaitFor(t, 30*time.Second, "each region's notifier to skip the other's onlines", func() bool {
		return skipped("us") == 2 && skipped("eu") == 1
	})
	// alice goes away, then says bye: each once, from eu.
	clients["alice"].Send(map[string]any{"op": "status", "status": "away", "id": 1})
	rcv.once("alice", "user.status")
	// us must see the away before the bye: a region that gets both in one
	// flush sees only the offline, as a subscriber would, and decides one
	// event, not two.
	testkit.WaitFor(t, 30*time.Second, "us's notifier to skip alice's status", func() bool {
		return skipped("us") == 3
	})
	clients["alice"].Send(map[string]any{"op": "bye"})
	if b := rcv.once("alice", "user.offline"); b.Data.Reason != "disconnected" {
		t.Fatalf("alice's offline: %+v", b)
	}
	testkit.WaitFor(t, 30*time.Second, "us's notifier to skip alice's offline", func() bool {
		return skipped("us") == 4
	})
	testkit.WaitFor(t, 30*time.Second, "the webhook queues to empty", func() bool {
		for _, g := range gs {
			if g.GW.WebhookStats().Queued != 0 {
				return false
			}
		}
		return true
	})
	for _, u := range []string{"alice", "bob", "carol"} {
		for _, typ := range []string{"user.online", "user.status", "user.offline"} {
			if got := rcv.of(u, typ); len(got) > 1 {
				t.Errorf("%s %s delivered %d times (from %s and %s)", u, typ, len(got), got[0].from, got[1].from)
			}
		}
	}
	if got := skipped("eu"); got != 1 {
		t.Errorf("eu skipped %d events, want bob's online", got)
	}
}
