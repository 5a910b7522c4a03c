package redisgw

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/rollcall/rollcall/protocol"
)

// The Redis data model of the baseline, the design a team would build on
// Redis today:
//
//	PREFIX s:USER\x1fDEVICE  one key per session, value "EPOCH\x1fSTATUS\x1fSESSION\x1fGATEWAY",
//	                          TTL = the session timeout; every heartbeat re-SETs it
//	PREFIX u:USER            set of the user's devices (an index, cleaned lazily)
//	PREFIX presence          pub/sub channel: the payload is a user whose presence changed
//	__keyevent@DB__:expired  keyspace notification: a session key timed out
//
// Every write is epoch-guarded by a Lua script: it changes a session key
// only when the stored epoch is at most the writer's, so a delayed write of
// an older connection never overwrites a newer one.

// sep separates the parts of keys and values. Names are free of control
// characters (validated at hello), so it never occurs inside one.
const sep = "\x1f"

// writeScript: KEYS[1] session key; ARGV epoch, value, ttl ms, channel,
// user, publish (0/1). Returns 1 if written, 0 if a newer epoch holds the
// key (this connection is superseded).
var writeScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if cur then
  local e = tonumber(string.match(cur, '^(%d+)'))
  if e and e > tonumber(ARGV[1]) then return 0 end
end
redis.call('SET', KEYS[1], ARGV[1] .. ARGV[2], 'PX', ARGV[3])
if ARGV[6] == '1' then redis.call('PUBLISH', ARGV[4], ARGV[5]) end
return 1
`)

// helloScript: KEYS[1] session key, KEYS[2] user index; ARGV now ms,
// last_epoch, ttl ms, device, value without the epoch, channel, user, max
// epoch. The epoch is max(now, last_epoch+1, stored+1); returns it, or -1
// when it would exceed the max.
var helloScript = redis.NewScript(`
local e = tonumber(ARGV[1])
local l = tonumber(ARGV[2]) + 1
if l > e then e = l end
local cur = redis.call('GET', KEYS[1])
if cur then
  local c = tonumber(string.match(cur, '^(%d+)'))
  if c and c + 1 > e then e = c + 1 end
end
if e > tonumber(ARGV[8]) then return -1 end
local es = string.format('%.0f', e)
redis.call('SET', KEYS[1], es .. ARGV[5], 'PX', ARGV[3])
redis.call('SADD', KEYS[2], ARGV[4])
redis.call('PUBLISH', ARGV[6], ARGV[7])
return es
`)

// closeScript: KEYS[1] session key, KEYS[2] user index; ARGV epoch,
// channel, user, device. Deletes the key if it still holds this epoch
// (and the device from the index), and publishes the change.
var closeScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if not cur then return 0 end
local e = tonumber(string.match(cur, '^(%d+)'))
if e ~= tonumber(ARGV[1]) then return 0 end
redis.call('DEL', KEYS[1])
redis.call('SREM', KEYS[2], ARGV[4])
redis.call('PUBLISH', ARGV[2], ARGV[3])
return 1
`)

// presenceScript: KEYS[1] user index; ARGV[1] the user's session key
// prefix. Returns device, value pairs of the live sessions; devices whose
// key is gone leave the index.
var presenceScript = redis.NewScript(`
local out = {}
for _, d in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local v = redis.call('GET', ARGV[1] .. d)
  if v then
    out[#out + 1] = d
    out[#out + 1] = v
  else
    redis.call('SREM', KEYS[1], d)
  end
end
return out
`)

// store is the gateway's view of Redis.
type store struct {
	rdb     *redis.Client
	prefix  string
	channel string // presence change channel
	expired string // keyspace expiry channel
}

func newStore(rdb *redis.Client, prefix string, db int) *store {
	return &store{rdb: rdb, prefix: prefix, channel: prefix + "presence",
		expired: fmt.Sprintf("__keyevent@%d__:expired", db)}
}

func (s *store) sessionKey(user, device string) string {
	return s.prefix + "s:" + user + sep + device
}

func (s *store) userKey(user string) string { return s.prefix + "u:" + user }

// userOfKey returns the user of a session key, false for another key.
func (s *store) userOfKey(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, s.prefix+"s:")
	if !ok {
		return "", false
	}
	user, _, ok := strings.Cut(rest, sep)
	return user, ok && user != ""
}

// load loads the scripts, so that pipelines can use EVALSHA.
func (s *store) load(ctx context.Context) error {
	for _, sc := range []*redis.Script{writeScript, helloScript, closeScript, presenceScript} {
		if err := sc.Load(ctx, s.rdb).Err(); err != nil {
			return fmt.Errorf("redis: loading scripts: %w", err)
		}
	}
	return nil
}

// value is the stored value after the epoch.
func value(status, session, gateway string) string {
	return sep + status + sep + session + sep + gateway
}

// errEpochExhausted: the (user, device) holds the largest epoch.
var errEpochExhausted = errors.New("epoch exhausted")

func (s *store) hello(ctx context.Context, user, device string, nowMS, lastEpoch uint64, ttlMS int64, val string) (uint64, error) {
	r, err := helloScript.Run(ctx, s.rdb, []string{s.sessionKey(user, device), s.userKey(user)},
		nowMS, lastEpoch, ttlMS, device, val, s.channel, user, protocol.MaxEpoch).Result()
	if err != nil {
		return 0, fmt.Errorf("redis hello: %w", err)
	}
	switch v := r.(type) {
	case int64:
		return 0, errEpochExhausted
	case string:
		e, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("redis hello: epoch %q: %w", v, err)
		}
		return e, nil
	}
	return 0, fmt.Errorf("redis hello: unexpected reply %T", r)
}

// writeCmd queues an epoch-guarded write into a pipeline.
func (s *store) writeCmd(ctx context.Context, p redis.Pipeliner, user, device string, epoch uint64, val string, ttlMS int64, publish bool) *redis.Cmd {
	pub := "0"
	if publish {
		pub = "1"
	}
	return writeScript.EvalSha(ctx, p, []string{s.sessionKey(user, device)},
		strconv.FormatUint(epoch, 10), val, ttlMS, s.channel, user, pub)
}

// write is one epoch-guarded write outside a pipeline; false means a newer
// epoch holds the key.
func (s *store) write(ctx context.Context, user, device string, epoch uint64, val string, ttlMS int64, publish bool) (bool, error) {
	pub := "0"
	if publish {
		pub = "1"
	}
	n, err := writeScript.Run(ctx, s.rdb, []string{s.sessionKey(user, device)},
		strconv.FormatUint(epoch, 10), val, ttlMS, s.channel, user, pub).Int64()
	if err != nil {
		return false, fmt.Errorf("redis write: %w", err)
	}
	return n == 1, nil
}

// closeCmd queues an epoch-guarded delete (a clean disconnect) into a
// pipeline.
func (s *store) closeCmd(ctx context.Context, p redis.Scripter, user, device string, epoch uint64) *redis.Cmd {
	return closeScript.EvalSha(ctx, p, []string{s.sessionKey(user, device), s.userKey(user)},
		strconv.FormatUint(epoch, 10), s.channel, user, device)
}

// close is closeCmd outside a pipeline.
func (s *store) close(ctx context.Context, user, device string, epoch uint64) error {
	if err := closeScript.Run(ctx, s.rdb, []string{s.sessionKey(user, device), s.userKey(user)},
		strconv.FormatUint(epoch, 10), s.channel, user, device).Err(); err != nil {
		return fmt.Errorf("redis close: %w", err)
	}
	return nil
}

// stored is one session as Redis holds it.
type stored struct {
	Device  string
	Epoch   uint64
	Status  string
	Session string
	Gateway string
}

// parseValue decodes a stored session value.
func parseValue(device, v string) (stored, error) {
	parts := strings.Split(v, sep)
	if len(parts) != 4 {
		return stored{}, fmt.Errorf("session value has %d parts, want 4", len(parts))
	}
	e, err := strconv.ParseUint(parts[0], 10, 64)
	if err != nil {
		return stored{}, fmt.Errorf("session value epoch: %w", err)
	}
	if !validStatus(parts[1]) {
		return stored{}, fmt.Errorf("session value status %q", parts[1])
	}
	return stored{Device: device, Epoch: e, Status: parts[1], Session: parts[2], Gateway: parts[3]}, nil
}

// presences reads the live sessions of users, in one pipeline.
func (s *store) presences(ctx context.Context, users []string) ([][]stored, error) {
	p := s.rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(users))
	for i, u := range users {
		cmds[i] = presenceScript.EvalSha(ctx, p, []string{s.userKey(u)}, s.sessionKey(u, ""))
	}
	if _, err := p.Exec(ctx); err != nil && !isNoScript(err) {
		return nil, fmt.Errorf("redis presence: %w", err)
	}
	out := make([][]stored, len(users))
	for i, c := range cmds {
		if err := c.Err(); err != nil {
			if !isNoScript(err) {
				return nil, fmt.Errorf("redis presence: %w", err)
			}
			c = presenceScript.Run(ctx, s.rdb, []string{s.userKey(users[i])}, s.sessionKey(users[i], ""))
		}
		vals, err := c.StringSlice()
		if err != nil {
			return nil, fmt.Errorf("redis presence: %w", err)
		}
		for j := 0; j+1 < len(vals); j += 2 {
			st, err := parseValue(vals[j], vals[j+1])
			if err != nil {
				continue // not ours to crash on; the key expires
			}
			out[i] = append(out[i], st)
		}
	}
	return out, nil
}

func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}
