package client

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rollcall/rollcall/auth"
	"github.com/rollcall/rollcall/node"
	"github.com/rollcall/rollcall/protocol"
)

var testSecret = []byte("0123456789abcdef0123456789abcdef")

func startAuthNode(t *testing.T) *node.Node {
	t.Helper()
	cfg := node.DefaultConfig()
	cfg.Name = "g0"
	cfg.ClientAddr = "127.0.0.1:0"
	cfg.HTTPAddr = ""
	cfg.Secret = testSecret
	cfg.SweepInterval = 20 * time.Millisecond
	gw, err := node.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := gw.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gw.Close() })
	return gw
}

// TestTokenRefresh: the client refreshes its token before it expires, on
// the same connection (the session keeps its epoch).
func TestTokenRefresh(t *testing.T) {
	gw := startAuthNode(t)
	signer, err := auth.NewSecretSigner(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	var minted atomic.Int32
	token := func(context.Context) (string, error) {
		minted.Add(1)
		return signer.Sign(auth.TokenSpec{User: "alice", TTL: 2 * time.Second}, time.Now())
	}
	c := dialT(t, Config{Addrs: []string{gw.ClientAddr().String()}, User: "alice", Device: "d", Token: token})
	first, _ := c.Session()
	waitFor(t, "two refreshes", func() bool { return minted.Load() >= 3 })
	ctx := ctxT(t)
	p, err := c.Get(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	now, ok := c.Session()
	if !ok || now.Epoch != first.Epoch || !p.Online {
		t.Fatalf("after refreshes: session %+v (first epoch %d), presence %+v", now, first.Epoch, p)
	}
}

func TestDialBadToken(t *testing.T) {
	gw := startAuthNode(t)
	ctx := ctxT(t)
	_, err := Dial(ctx, Config{Addrs: []string{gw.ClientAddr().String()}, User: "alice",
		Token: func(context.Context) (string, error) { return "x.y.z", nil }})
	if !HasCode(err, protocol.CodeAuthFailed) {
		t.Fatalf("Dial with a bad token = %v, want auth_failed", err)
	}
}
