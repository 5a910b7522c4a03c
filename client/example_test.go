package client_test

import (
	"context"
	"fmt"
	"log"
	"strings"
	"time"

	"github.com/rollcall/rollcall/client"
	"github.com/rollcall/rollcall/node"
	"github.com/rollcall/rollcall/protocol"
)

// devGateway starts a --dev gateway on loopback for the examples; a real
// service dials its cluster's addresses instead.
func devGateway() (addr string, stop func()) {
	cfg := node.DefaultConfig()
	cfg.Name = "dev1"
	cfg.ClientAddr = "127.0.0.1:0"
	cfg.HTTPAddr = ""
	cfg.Dev = true
	gw, err := node.New(cfg)
	if err != nil {
		log.Fatal(err)
	}
	if err := gw.Start(); err != nil {
		log.Fatal(err)
	}
	return gw.ClientAddr().String(), func() { _ = gw.Close() }
}

func Example() {
	addr, stop := devGateway()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	c, err := client.Dial(ctx, client.Config{
		Addrs:  []string{addr}, // every gateway of the cluster, in preference order
		User:   "alice",
		Device: "laptop",
		// Token: func(ctx context.Context) (string, error) { return mintToken(ctx, "alice") },
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	if err := c.Status(ctx, "away"); err != nil {
		log.Fatal(err)
	}
	p, err := c.Get(ctx, "alice")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(p.User, p.Online, p.Status)
	// Output: alice true away
}

func ExampleClient_Subscribe() {
	addr, stop := devGateway()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	watcher, err := client.Dial(ctx, client.Config{Addrs: []string{addr}, User: "watcher"})
	if err != nil {
		log.Fatal(err)
	}
	defer watcher.Close()
	sub, err := watcher.Subscribe(ctx, "bob")
	if err != nil {
		log.Fatal(err)
	}
	ev := <-sub.Events() // first, bob's current presence
	fmt.Println(ev.User, ev.Status)

	bob, err := client.Dial(ctx, client.Config{Addrs: []string{addr}, User: "bob"})
	if err != nil {
		log.Fatal(err)
	}
	for ev := range sub.Events() {
		if ev.Online {
			fmt.Println(ev.User, ev.Status)
			break
		}
	}
	_ = bob.Close() // bye: bob shows offline at once
	for ev := range sub.Events() {
		if !ev.Online {
			fmt.Println(ev.User, ev.Status)
			break
		}
	}
	// Output:
	// bob offline
	// bob available
	// bob offline
}

func ExampleHasCode() {
	addr, stop := devGateway()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	c, err := client.Dial(ctx, client.Config{Addrs: []string{addr}, User: "alice"})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	err = c.Status(ctx, "sleepy")
	fmt.Println(client.HasCode(err, protocol.CodeBadRequest))
	// Output: true
}

// A RawClient for a caller that writes request lines itself and reads the
// gateway's lines as they come; the library still says hello, heartbeats
// and reconnects.
func ExampleDialRaw() {
	addr, stop := devGateway()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	r, err := client.DialRaw(ctx, client.Config{Addrs: []string{addr}, User: "alice", Device: "laptop"})
	if err != nil {
		log.Fatal(err)
	}
	welcome := <-r.Lines() // the first line is the gateway's welcome
	fmt.Println(strings.HasPrefix(string(welcome.Data), `{"op":"welcome",`))

	if err := r.Send(ctx, []byte(`{"op":"status","status":"away","id":"s1"}`)); err != nil {
		log.Fatal(err)
	}
	fmt.Println(string((<-r.Lines()).Data))
	if err := r.Send(ctx, []byte(`{"op":"nope"}`)); err != nil {
		log.Fatal(err)
	}
	fmt.Println(string((<-r.Lines()).Data))

	if err := r.Close(); err != nil { // bye
		log.Fatal(err)
	}
	for l := range r.Lines() { // the bye's reply, then Lines closes
		fmt.Println(string(l.Data))
	}
	// Output:
	// true
	// {"op":"ok","id":"s1"}
	// {"op":"error","code":"unknown_op","message":"unknown op \"nope\""}
	// {"op":"ok"}
}
