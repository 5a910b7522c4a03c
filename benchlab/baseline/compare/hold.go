package compare

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rollcall/rollcall/benchlab/baseline/redisgw"
	"github.com/rollcall/rollcall/client"
)

// The backend scenario's users: BackendUser(i) for i in [0, Users), each
// present through one backend worker. On Rollcall each is a tracked
// session (device BackendDevice) in group BackendGroup; on Redis the key
// RedisPresenceKey(user), holding the worker's epoch and name
// ("EPOCH:w1"), with a TTL.
const (
	BackendGroup  = "bt"
	BackendDevice = "web"
)

// BackendUser is the i-th user of the backend scenario.
func BackendUser(i int) string { return "u" + strconv.Itoa(i) }

// RedisPresenceKey is the key a Redis backend worker keeps alive while
// user is present.
func RedisPresenceKey(user string) string { return "presence:" + user }

// redisPipeline is how many writes a Redis worker sends in one pipeline.
const redisPipeline = 1000

// HoldConfig is one backend worker keeping Users users present until its
// context ends (or it is killed): what an application's backend tier does
// for the users connected to it.
type HoldConfig struct {
	// System is Rollcall (one connection to the gateway at Addr tracking
	// every user; its client heartbeats the connection as the gateway's
	// welcome asks, and nothing else is sent) or Redis (an epoch-guarded
	// write, EVALSHA of redisgw.EpochSet, setting "EPOCH:w1" with the TTL
	// for every user, in pipelines of 1000, every Refresh, against the
	// redis-server at Addr).
	System string
	Addr   string
	Users  int
	// Refresh and TTL are the Redis worker's refresh period and keys'
	// TTL (whole seconds).
	Refresh, TTL time.Duration
	// Epoch is the Redis worker's epoch (0: the wall clock in ms at
	// start): its writes set a key only while the key holds no newer
	// epoch, so a delayed refresh of an older worker never overwrites or
	// extends a newer worker's key. A user whose key a newer epoch holds
	// is the newer worker's; this one stops refreshing it.
	Epoch uint64
	// Ready gets one line, "ready N", once every user is present (Rollcall:
	// tracked; Redis: the first refresh done, N the users it holds, less
	// those a newer epoch held).
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
	epoch := c.Epoch
	if epoch == 0 {
		epoch = uint64(time.Now().UnixMilli())
	}
	ttl := c.TTL.Truncate(time.Second)
	keys := make([]string, c.Users)
	for i := range keys {
		keys[i] = RedisPresenceKey(BackendUser(i))
	}
	if err := redisgw.LoadEpochSet(ctx, rdb); err != nil {
		return fmt.Errorf("hold: redis: loading the script: %w", err)
	}
	// batch writes keys in one pipeline and returns those still held.
	batch := func(keys []string) ([]string, error) {
		pipe := rdb.Pipeline()
		cmds := make([]*redis.Cmd, len(keys))
		for i, k := range keys {
			cmds[i] = redisgw.EpochSet(ctx, pipe, k, epoch, redisWorkerValue, ttl)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, err
		}
		held := make([]string, 0, len(keys))
		for i, cmd := range cmds {
			if n, _ := cmd.Int64(); n == 1 {
				held = append(held, keys[i])
			}
		}
		return held, nil
	}
	refresh := func() error {
		var held []string
		for start := 0; start < len(keys); start += redisPipeline {
			part := keys[start:min(start+redisPipeline, len(keys))]
			h, err := batch(part)
			if redisgw.IsNoScript(err) { // the server lost its scripts (restarted)
				if err = redisgw.LoadEpochSet(ctx, rdb); err == nil {
					h, err = batch(part)
				}
			}
			if err != nil {
				return err
			}
			held = append(held, h...)
		}
		keys = held
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

// redisWorkerValue follows the epoch in a Redis worker's keys.
const redisWorkerValue = ":w1"
