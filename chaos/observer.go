package chaos

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/rollcall/rollcall/protocol"
)

// Observers: per gateway, one subscriber connection subscribed to every
// workload user (each event is an obs record of its stream, the
// connection id) and one poller connection asking get of every workload
// user every pollEvery (each answer is an obs record with the time the
// get was sent). Both reconnect when their gateway dies or restarts; a
// new connection is a new stream with its own version sequence.

// pollEvery is the period of the get polls.
const pollEvery = 250 * time.Millisecond

// retryEvery is how often an observer retries a gateway that is down.
const retryEvery = 100 * time.Millisecond

// subscriber keeps a subscription to every workload user on g until ctx
// ends.
func (e *env) subscriber(ctx context.Context, g *Gateway) {
	for ctx.Err() == nil {
		var life atomic.Int64 // set before sub, read by the reader
		onPush := func(c int, f *frame, t float64) {
			if f.Op != protocol.OpEvent {
				return
			}
			e.rec.Write(Record{T: t, K: KindObs, Src: "event", GW: g.Name, Life: int(life.Load()), C: c, P: []protocol.Presence{f.presence()}})
		}
		s, err := e.connect(ctx, g, "sub", "chaos-sub-"+g.Name, "sub", "", 0, nil, 0, onPush)
		if err != nil {
			_ = sleepCtx(ctx, retryEvery)
			continue
		}
		life.Store(int64(s.life))
		if _, err := s.op(ctx, Record{Op: "sub"}, map[string]any{"op": protocol.OpSub, "users": e.users}); err == nil {
			select {
			case <-ctx.Done():
			case <-s.conn.done:
			}
		}
		s.close(ctx.Err() == nil)
	}
}

// poller asks g for every workload user's presence every pollEvery until
// ctx ends.
func (e *env) poller(ctx context.Context, g *Gateway) {
	for ctx.Err() == nil {
		s, err := e.connect(ctx, g, "poll", "chaos-poll-"+g.Name, "poll", "", 0, nil, 0, nil)
		if err != nil {
			_ = sleepCtx(ctx, retryEvery)
			continue
		}
		// The gets are the poller's requests; it needs no heartbeat.
		s.stopHeartbeat()
		next := time.Now()
		for ctx.Err() == nil && s.alive() {
			f, sent, t, err := s.conn.request(ctx, map[string]any{"op": protocol.OpGet, "users": e.users}, reqTimeout)
			if err != nil {
				e.rec.Write(Record{T: t, K: KindOp, C: s.conn.id, Op: "get", Sent: sent, Err: errCode(err)})
				break
			}
			e.rec.Write(Record{T: t, K: KindObs, Src: "get", GW: g.Name, Life: s.life, C: s.conn.id, Sent: sent, P: f.presences()})
			next = next.Add(pollEvery)
			if d := time.Until(next); d > 0 {
				_ = sleepCtx(ctx, d)
			} else {
				next = time.Now()
			}
		}
		s.close(ctx.Err() == nil)
	}
}
