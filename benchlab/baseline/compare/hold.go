package compare

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rollcall/rollcall/client"
)

// The backend scenario's users: BackendUser(i) for i in [0, Users), each
// present through one backend worker. On Rollcall each is a tracked
// session (device BackendDevice) in group BackendGroup; on Redis the key
// RedisPresenceKey(user), holding the worker's name, with a TTL.
const (
	BackendGroup  = "bt"
	BackendDevice = "web"
)

// BackendUser is the i-th user of the backend scenario.
func BackendUser(i int) string { return "u" + strconv.Itoa(i) }

// RedisPresenceKey is the key a Redis backend worker keeps alive while
// user is present.
func RedisPresenceKey(user string) string { return "presence:" + user }

// redisPipeline is how many SETs a Redis worker sends in one pipeline.
const redisPipeline = 1000

// HoldConfig is one backend worker keeping Users users present until its
// context ends (or it is killed): what an application's backend tier does
// for the users connected to it.
type HoldConfig struct {
	// System is Rollcall (one connection to the gateway at Addr tracking
	// every user; its client heartbeats the connection as the gateway's
	// welcome asks, and nothing else is sent) or Redis (SET key EX TTL for
	// every user, in pipelines of 1000, every Refresh, against the
	// redis-server at Addr).
	System string
	Addr   string
	Users  int
	// Refresh and TTL are the Redis worker's refresh period and keys'
	// TTL (whole seconds: SET ... EX).
	Refresh, TTL time.Duration
	// Ready gets one line, "ready N", once every user is present (Rollcall:
	// tracked; Redis: the first refresh done).
	Ready io.Writer
}

// Hold runs one backend worker (HoldConfig) until ctx ends.
func Hold(ctx context.Context, c HoldConfig) error {
	if c.Users <= 0 || c.Addr == "" {
		return errors.New("hold: want an address and users")
	}
	if c.Ready == nil {
		c.Ready = io.Discard
	}
	switch c.System {
	case Rollcall:
		return holdRollcall(ctx, c)
	case Redis:
		if c.Refresh <= 0 || c.TTL < time.Second {
			return errors.New("hold: redis wants --refresh and a --ttl of at least 1s")
		}
		return holdRedis(ctx, c)
	}
	return fmt.Errorf("hold: unknown system %q", c.System)
}

func holdRollcall(ctx context.Context, c HoldConfig) error {
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	cl, err := client.Dial(dctx, client.Config{Addrs: []string{c.Addr}, User: "bt-backend", Device: "worker"})
	cancel()
	if err != nil {
		return fmt.Errorf("hold: %w", err)
	}
	defer cl.Close()
	sessions := make([]client.Tracked, c.Users)
	for i := range sessions {
		sessions[i] = client.Tracked{User: BackendUser(i), Device: BackendDevice, Groups: []string{BackendGroup}}
	}
	rs, err := cl.Track(ctx, sessions)
	if err != nil {
		return fmt.Errorf("hold: track: %w", err)
	}
	for i, r := range rs {
		if err := client.TrackErr(r); err != nil {
			return fmt.Errorf("hold: track %s: %w", sessions[i].User, err)
		}
	}
	fmt.Fprintf(c.Ready, "ready %d\n", len(rs))
	<-ctx.Done()
	return nil
}

func holdRedis(ctx context.Context, c HoldConfig) error {
	rdb := redis.NewClient(&redis.Options{Addr: c.Addr, PoolSize: 2})
	defer rdb.Close()
	keys := make([]string, c.Users)
	for i := range keys {
		keys[i] = RedisPresenceKey(BackendUser(i))
	}
	refresh := func() error {
		for start := 0; start < len(keys); start += redisPipeline {
			pipe := rdb.Pipeline()
			for _, k := range keys[start:min(start+redisPipeline, len(keys))] {
				pipe.Set(ctx, k, "w1", c.TTL)
			}
			if _, err := pipe.Exec(ctx); err != nil {
				return err
			}
		}
		return nil
	}
	if err := refresh(); err != nil {
		return fmt.Errorf("hold: redis: %w", err)
	}
	fmt.Fprintf(c.Ready, "ready %d\n", len(keys))
	t := time.NewTicker(c.Refresh)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := refresh(); err != nil && ctx.Err() == nil {
			return fmt.Errorf("hold: redis: %w", err)
		}
	}
}
