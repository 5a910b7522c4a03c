package redisgw

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// EpochSet queues into p the epoch-guarded write the gateway's heartbeats
// use (writeScript), for a key of another data model: key := EPOCH + val
// with a TTL of ttl (milliseconds), unless key holds a newer epoch, so a
// delayed write of an older writer never overwrites (or extends) a newer
// one's key. The command's reply is 1 if written, 0 if a newer epoch holds
// key. val must not start with a digit. Pipelines send EVALSHA: load the
// script first (LoadEpochSet).
func EpochSet(ctx context.Context, p redis.Scripter, key string, epoch uint64, val string, ttl time.Duration) *redis.Cmd {
	return writeScript.EvalSha(ctx, p, []string{key}, strconv.FormatUint(epoch, 10), val, ttl.Milliseconds(), "", "", "0")
}

// LoadEpochSet loads EpochSet's script into the redis-server of rdb.
func LoadEpochSet(ctx context.Context, rdb redis.Scripter) error {
	return writeScript.Load(ctx, rdb).Err()
}

// IsNoScript reports whether err is Redis's NOSCRIPT error (the script is
// not loaded, as after a restart or SCRIPT FLUSH).
func IsNoScript(err error) bool { return isNoScript(err) }
