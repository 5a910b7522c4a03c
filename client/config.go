package client

import (
	"context"
	"crypto/tls"
	"math/rand/v2"
	"time"

	"go.uber.org/zap"
)

// Config configures a Client. Addrs and User are required.
type Config struct {
	// Addrs are gateway client addresses (host:port). The client dials
	// them in order and fails over to the next one; addresses a draining
	// gateway names in its shutting_down error are tried first.
	Addrs []string
	// TLS, when set, dials TLS with this configuration.
	TLS *tls.Config
	// Token returns the token for hello and refresh; it is called at every
	// connect and before the token in use expires. Nil sends no token (a
	// --dev gateway).
	Token func(ctx context.Context) (string, error)

	// User is the user to connect as.
	User string
	// Device names this device. Empty lets the first gateway assign one,
	// which the client then keeps for its reconnects.
	Device string
	// Status is the initial status: available (default), away or busy.
	Status string
	// Groups are joined at every connect.
	Groups []string
	// Meta is the session's initial meta, sent at every connect: a value
	// that encodes to a JSON object of at most protocol.MaxMetaBytes (nil
	// for none). SetMeta changes it.
	Meta any

	// Logger receives connection events; nil logs nothing.
	Logger *zap.Logger
	// Backoff paces reconnects; zero fields take DefaultBackoff's.
	Backoff Backoff
	// DialAttempts bounds the connects Dial makes (each to the next
	// address) before it gives up and returns the last one's error. 0, the
	// default, retries until Dial's ctx is done. Reconnects after the first
	// welcome are never bounded.
	DialAttempts int
	// Dial opens connections; nil is DialAny: ws:// and wss:// addresses over
	// WebSocket, host:port over TCP (or TLS with TLS set).
	Dial DialFunc
	// DialTimeout bounds one connect: dial, TLS and hello. Default 10s.
	DialTimeout time.Duration
	// EventBuffer is each Subscription's channel capacity. Default 64.
	// Undelivered events of one subject coalesce to the newest, so a slow
	// reader misses intermediate states, never the latest.
	EventBuffer int
	// MessageBuffer is the Messages channel's capacity; messages past it
	// are dropped (and logged). Default 256.
	MessageBuffer int
	// OnState, if set, is called (from the client's goroutines, not
	// concurrently) whenever the connection state changes.
	OnState func(State)
}

// State is the client's connection state, as reported to Config.OnState.
type State struct {
	// Connected is true once a gateway welcomed the session and the
	// client re-established its subscriptions.
	Connected bool
	// Gateway is the connected gateway's node name, Addr the address
	// dialled; Epoch is the session's epoch there.
	Gateway, Addr string
	Epoch         uint64
	// Err is why the previous connection ended (nil for the first).
	Err error
}

// Backoff is a jittered exponential backoff: the n-th consecutive failed
// connect waits a random duration in [d/2, d], d = min(Max, Min*Factor^n).
// A connection that got its welcome resets n.
type Backoff struct {
	Min, Max time.Duration
	Factor   float64
}

// DefaultBackoff is 100ms doubling up to 10s.
var DefaultBackoff = Backoff{Min: 100 * time.Millisecond, Max: 10 * time.Second, Factor: 2}

func (b Backoff) withDefaults() Backoff {
	if b.Min <= 0 {
		b.Min = DefaultBackoff.Min
	}
	if b.Max <= 0 {
		b.Max = DefaultBackoff.Max
	}
	if b.Max < b.Min {
		b.Max = b.Min
	}
	if b.Factor < 1 {
		b.Factor = DefaultBackoff.Factor
	}
	return b
}

// delay is the wait before attempt n (0-based), jittered.
func (b Backoff) delay(n int) time.Duration {
	d := float64(b.Min)
	for i := 0; i < n && d < float64(b.Max); i++ {
		d *= b.Factor
	}
	d = min(d, float64(b.Max))
	return time.Duration(d/2 + rand.Float64()*d/2)
}
