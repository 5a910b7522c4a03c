package node_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/rollcall/rollcall/client"
	"github.com/rollcall/rollcall/internal/testcluster"
	"github.com/rollcall/rollcall/internal/testkit"
	"github.com/rollcall/rollcall/protocol"
)

// TestTrackedSessionsAcrossGateways: on three gateways joined by gossip,
// the sessions a backend tracks on g0 (through the Go client's Track) are
// online on g1 and g2, owned by g0; when the backend's connection closes,
// every one of them shows offline on g1 and g2; so too when a backend's
// connection goes silent past the timeout.
func TestTrackedSessionsAcrossGateways(t *testing.T) {
	const users = 300
	gs := testcluster.Start(t, 3, testcluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dial := func(g *testcluster.Gateway, user string) *client.Client {
		c, err := client.Dial(ctx, client.Config{Addrs: []string{g.GW.ClientAddr().String()}, User: user, Device: "d"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	watchers := []*client.Client{dial(gs[1], "w1"), dial(gs[2], "w2")}
	online := func(want int) {
		t.Helper()
		for _, w := range watchers {
			testkit.WaitFor(t, 30*time.Second, fmt.Sprintf("%d tracked users online", want), func() bool {
				n, err := w.GroupCount(ctx, "room")
				return err == nil && n == want
			})
		}
	}

	backend := dial(gs[0], "backend")
	sessions := make([]client.Tracked, users)
	for i := range sessions {
		sessions[i] = client.Tracked{User: "u" + strconv.Itoa(i), Device: "web", Status: "away", Groups: []string{"room"}}
	}
	rs, err := backend.Track(ctx, sessions)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range rs {
		if client.TrackErr(r) != nil || r.Session == "" || r.Epoch == 0 || r.User != sessions[i].User {
			t.Fatalf("result %d: %+v", i, r)
		}
	}
	online(users)
	p, err := watchers[1].Get(ctx, "u7")
	if err != nil || !p.Online || p.Status != "away" || len(p.Sessions) != 1 || p.Sessions[0].Gateway != "g0" || p.Sessions[0].Session != rs[7].Session {
		t.Fatalf("u7 on g2: %+v %v", p, err)
	}
	if err := backend.Close(); err != nil {
		t.Fatal(err)
	}
	online(0)

	// A backend that goes silent: its sessions expire with its connection.
	nc, err := net.Dial("tcp", gs[0].GW.ClientAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	r := bufio.NewReader(nc)
	req := protocol.Request{Op: protocol.OpHello, User: "backend", Device: "silent"}
	line, _ := json.Marshal(req)
	fmt.Fprintf(nc, "%s\n", line)
	if reply, err := r.ReadString('\n'); err != nil || !json.Valid([]byte(reply)) {
		t.Fatalf("welcome: %q %v", reply, err)
	}
	for lo := 0; lo < users; lo += protocol.MaxTrackPerRequest {
		req := protocol.Request{Op: protocol.OpTrack, ID: json.RawMessage("1")}
		for i := lo; i < min(users, lo+protocol.MaxTrackPerRequest); i++ {
			req.Sessions = append(req.Sessions, protocol.TrackSession{User: "u" + strconv.Itoa(i), Device: "web", Groups: []string{"room"}})
		}
		line, _ := json.Marshal(req)
		fmt.Fprintf(nc, "%s\n", line)
		var reply protocol.TrackReply
		if s, err := r.ReadString('\n'); err != nil || json.Unmarshal([]byte(s), &reply) != nil || reply.Op != protocol.OpTracked {
			t.Fatalf("track: %.200q %v", s, err)
		}
	}
	online(users)
	// Silent from here: the gateway expires the connection after its
	// timeout (2s), and every session it tracks with it.
	online(0)
	p, err = watchers[0].Get(ctx, "u7")
	if err != nil || p.Online {
		t.Fatalf("u7 on g1 after the backend went silent: %+v %v", p, err)
	}
}
