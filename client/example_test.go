package client_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/rollcall/rollcall/client"
	"github.com/rollcall/rollcall/node"
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
	fmt.Println(client.HasCode(err, client.CodeBadRequest))
	// Output: true
}
