package chaos

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// env is what the workload, the observers and the faults share in one
// run. Static after Run builds it, except the counters.
type env struct {
	rec    *Recorder
	cl     *Cluster
	users  []string
	bounds Bounds
	// settleAt is when the workload stops changing anything (history ms).
	settleAt float64

	nextConn atomic.Int64
}

// helloTimeout bounds the wait for a welcome: longer than the longest
// pause, so a hello to a paused gateway is answered after the resume
// instead of being abandoned (an abandoned hello leaves a session nobody
// knows the epoch of).
const helloTimeout = 8 * time.Second

// reqTimeout bounds the wait for any other reply.
const reqTimeout = 8 * time.Second

// session is one connection that said hello: its welcome and its
// heartbeat loop.
type session struct {
	conn    *clientConn
	gw      *Gateway
	life    int
	epoch   uint64
	id      string
	hbStop  chan struct{}
	hbOnce  sync.Once
	hbDone  chan struct{}
	ended   chan struct{} // closed once the end record is written
	rec     *Recorder
	hbEvery time.Duration
}

// connect dials g, says hello and records it. onPush receives events and
// messages. The connection's end is recorded when its reader stops. prev
// is the connection this one replaces, if any (for the history only).
func (e *env) connect(ctx context.Context, g *Gateway, role, user, dev, status string, lastEpoch uint64, groups []string, prev int, onPush func(c int, f *frame, t float64)) (*session, error) {
	nc, err := dialConn(ctx, g.ClientAddr)
	if err != nil {
		return nil, err
	}
	id := int(e.nextConn.Add(1))
	var push func(*frame, float64)
	if onPush != nil {
		push = func(f *frame, t float64) { onPush(id, f, t) }
	}
	c := newClientConn(id, nc, e.rec.Now, push)
	s := &session{conn: c, gw: g, hbStop: make(chan struct{}), hbDone: make(chan struct{}), ended: make(chan struct{}),
		rec: e.rec, hbEvery: e.bounds.Heartbeat}
	go func() {
		<-c.done
		code, at, _ := c.end()
		e.rec.Write(Record{T: at, K: KindEnd, C: id, Reason: code})
		close(s.ended)
	}()
	f, sent, t, err := c.request(ctx, helloReq(user, dev, status, lastEpoch, groups), helloTimeout)
	// Restarted while dialing: the welcome came from the new life, or the
	// connection dies at once.
	life := g.Life()
	r := Record{T: t, K: KindOp, C: id, Op: "hello", Sent: sent, Role: role, User: user, Dev: dev, GW: g.Name,
		Life: life, Status: status, LastEpoch: lastEpoch, Prev: prev}
	if err != nil {
		r.Err = errCode(err)
		e.rec.Write(r)
		c.close()
		return nil, err
	}
	w := f.welcome()
	r.Epoch, r.Session, r.Gateway = w.Epoch, w.Session, w.Gateway
	e.rec.Write(r)
	s.life, s.epoch, s.id = life, w.Epoch, w.Session
	go s.heartbeatLoop()
	return s, nil
}

// heartbeatLoop sends hb every heartbeat interval until stopHeartbeat or
// the connection ends.
func (s *session) heartbeatLoop() {
	defer close(s.hbDone)
	t := time.NewTicker(s.hbEvery)
	defer t.Stop()
	for {
		select {
		case <-s.hbStop:
			return
		case <-s.conn.done:
			return
		case <-t.C:
		}
		at, err := s.conn.heartbeat()
		if err != nil {
			return
		}
		s.rec.Write(Record{T: at, K: KindOp, C: s.conn.id, Op: "hb"})
	}
}

// stopHeartbeat stops the heartbeat loop and waits for it.
func (s *session) stopHeartbeat() {
	s.hbOnce.Do(func() { close(s.hbStop) })
	<-s.hbDone
}

// alive reports whether the connection's reader still runs.
func (s *session) alive() bool {
	select {
	case <-s.conn.done:
		return false
	default:
		return true
	}
}

// op sends a request, records it with its reply and returns the reply.
func (s *session) op(ctx context.Context, r Record, req map[string]any) (*frame, error) {
	f, sent, t, err := s.conn.request(ctx, req, reqTimeout)
	r.T, r.K, r.C, r.Sent = t, KindOp, s.conn.id, sent
	if err != nil {
		r.Err = errCode(err)
	} else if d := f.delivered(); d != nil {
		r.Delivered = d
	}
	s.rec.Write(r)
	return f, err
}

// close closes the connection, recording it as the client's own close
// (op close) unless the reader had already stopped.
func (s *session) close(record bool) {
	s.stopHeartbeat()
	if record && s.alive() {
		s.rec.Write(Record{K: KindOp, C: s.conn.id, Op: "close"})
	}
	s.conn.close()
	<-s.ended
}
