package node_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rollcall/rollcall/client"
	"github.com/rollcall/rollcall/internal/testcluster"
	"github.com/rollcall/rollcall/internal/testkit"
	"github.com/rollcall/rollcall/protocol"
)

// post makes a backend API request to gateway g and decodes its JSON
// answer, failing unless it is 200.
func post(t *testing.T, g *testcluster.Gateway, path, body string) map[string]any {
	t.Helper()
	resp, err := http.Post("http://"+g.GW.HTTPAddr().String()+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &m) != nil {
		t.Fatalf("POST %s: %s %s", path, resp.Status, b)
	}
	return m
}

// TestAPIAcrossGateways: on three gateways joined by gossip, the backend
// API of g0 reaches sessions owned by g1 and g2. A send is delivered to
// alice's sessions on both; a disconnect of her phone ends that session
// only, on its owner: the client gets kicked and stops, and every gateway
// shows the session disconnected; a disconnect of alice ends the rest.
func TestAPIAcrossGateways(t *testing.T) {
	gs := testcluster.Start(t, 3, testcluster.Options{HTTP: true, Timeout: 5 * time.Second, Heartbeat: 500 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dial := func(g *testcluster.Gateway, device string) *client.Client {
		c, err := client.Dial(ctx, client.Config{Addrs: []string{g.GW.ClientAddr().String()}, User: "alice", Device: device})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	phone, laptop := dial(gs[1], "phone"), dial(gs[2], "laptop")
	sessions := func(g *testcluster.Gateway) []protocol.SessionInfo {
		m := post(t, g, "/v1/presence", `{"users":["alice"]}`)
		b, _ := json.Marshal(m["users"])
		var ps []protocol.Presence
		if err := json.Unmarshal(b, &ps); err != nil || len(ps) != 1 {
			t.Fatalf("presence %v", m)
		}
		return ps[0].Sessions
	}
	testkit.WaitFor(t, 30*time.Second, "g0 sees both of alice's sessions", func() bool { return len(sessions(gs[0])) == 2 })

	if m := post(t, gs[0], "/v1/send", `{"to":"alice","body":{"text":"hi"}}`); m["delivered"] != 2.0 {
		t.Fatalf("send: %v", m)
	}
	for _, c := range []*client.Client{phone, laptop} {
		select {
		case msg := <-c.Messages():
			if string(msg.Body) != `{"text":"hi"}` {
				t.Fatalf("message %+v", msg)
			}
		case <-ctx.Done():
			t.Fatal("no message")
		}
	}

	if m := post(t, gs[0], "/v1/users/alice/disconnect", `{"device":"phone"}`); m["disconnected"] != 1.0 || m["unreached"] != nil {
		t.Fatalf("disconnect the phone: %v", m)
	}
	select {
	case <-phone.Done():
	case <-ctx.Done():
		t.Fatal("the kicked client did not stop")
	}
	if !client.HasCode(phone.Err(), protocol.CodeKicked) {
		t.Fatalf("the phone's Err = %v, want kicked", phone.Err())
	}
	for _, g := range gs {
		testkit.WaitFor(t, 30*time.Second, g.GW.Name()+" sees the laptop alone", func() bool {
			s := sessions(g)
			return len(s) == 1 && s[0].Device == "laptop"
		})
	}

	if m := post(t, gs[0], "/v1/users/alice/disconnect", ``); m["disconnected"] != 1.0 {
		t.Fatalf("disconnect alice: %v", m)
	}
	select {
	case <-laptop.Done():
	case <-ctx.Done():
		t.Fatal("the kicked laptop did not stop")
	}
	for _, g := range gs {
		testkit.WaitFor(t, 30*time.Second, g.GW.Name()+" sees alice offline", func() bool { return len(sessions(g)) == 0 })
	}
	if m := post(t, gs[0], "/v1/send", `{"to":"alice","body":1}`); m["delivered"] != 0.0 {
		t.Fatalf("send after the kick: %v", m)
	}
}
