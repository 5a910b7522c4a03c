package client

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/rollcall/rollcall/protocol"
)

// Tracked is a session a backend holds on behalf of a user (Track): its
// user and device, and as a hello's, its status ("" for available),
// groups and meta (a value that encodes to a JSON object, or nil).
// Untrack reads User and Device only.
type Tracked struct {
	User, Device string
	Status       string
	Groups       []string
	Meta         any
}

// TrackResult is the outcome of one session of Track or Untrack: its id
// and epoch; or, for a session Track could not open, the code and message
// of why (TrackErr); or, in Untrack's, neither for a session this connection
// did not track.
type TrackResult = protocol.TrackResult

// TrackErr returns the refusal of one session of a Track as an *Error, or
// nil when the session is open.
func TrackErr(r TrackResult) error {
	if r.Code == "" {
		return nil
	}
	return &Error{Code: r.Code, Message: r.Message}
}

// trackLineBudget is the most bytes of one track request line Track
// builds: under the protocol's default longest line, with room for the
// envelope.
const trackLineBudget = protocol.MaxLineBytes - 256

// Track holds sessions on behalf of their users, as a backend does for the
// users of its own connection tier: each is a session of the cluster like
// any other (an id and an epoch per (user, device); a later connection of
// the same (user, device) supersedes it), owned by the gateway this client
// is connected to, and it lives as long as this client's connection. When
// the connection closes or goes silent, every session it tracks ends; the
// client then reconnects and tracks again, by itself, every session it
// tracked and did not untrack, as last tracked (new sessions: new ids and
// epochs), and logs a warning for any the gateway refuses. A session
// already tracked is set anew: its status, groups and meta, keeping its id
// and epoch.
//
// The token needs the backend grant. Track sends as many requests as it
// takes (protocol.MaxTrackPerRequest sessions each, within the default
// longest line), waits and retries when the gateway's allowance says
// rate_limited, and returns the results in sessions' order: a session the
// gateway could not open (too_many_sessions, epoch_exhausted) has
// TrackErr. A request the gateway refuses whole (bad_request, forbidden)
// ends Track with its *Error; the sessions of earlier requests stay
// tracked.
func (c *Client) Track(ctx context.Context, sessions []Tracked) ([]TrackResult, error) {
	entries := make([]protocol.TrackSession, len(sessions))
	for i, s := range sessions {
		meta, err := encodeMeta(s.Meta)
		if err != nil {
			return nil, fmt.Errorf("rollcall: sessions[%d]: %w", i, err)
		}
		entries[i] = protocol.TrackSession{User: s.User, Device: s.Device, Status: s.Status, Groups: slices.Clone(s.Groups), Meta: meta}
	}
	c.trackMu.Lock()
	defer c.trackMu.Unlock()
	rs, err := c.trackAll(ctx, protocol.OpTrack, entries, nil)
	// rs holds the results of the requests answered, in entries' order.
	c.mu.Lock()
	for i, r := range rs {
		k := trackKey(entries[i].User, entries[i].Device)
		if TrackErr(r) != nil {
			delete(c.tracked, k)
			continue
		}
		e, ok := c.tracked[k]
		if !ok {
			e.seq = c.trackSeq
			c.trackSeq++
		}
		e.s = entries[i]
		c.tracked[k] = e
	}
	c.mu.Unlock()
	return rs, err
}

// Untrack ends sessions this client's connection tracks, disconnected, and
// returns their ids and epochs in sessions' order (neither for one it did
// not track). It splits and retries as Track does. The client does not
// track them again after a reconnect, even when Untrack fails.
func (c *Client) Untrack(ctx context.Context, sessions []Tracked) ([]TrackResult, error) {
	entries := make([]protocol.TrackSession, len(sessions))
	c.trackMu.Lock()
	defer c.trackMu.Unlock()
	c.mu.Lock()
	for i, s := range sessions {
		entries[i] = protocol.TrackSession{User: s.User, Device: s.Device}
		delete(c.tracked, trackKey(s.User, s.Device))
	}
	c.mu.Unlock()
	return c.trackAll(ctx, protocol.OpUntrack, entries, nil)
}

// trackedEntry is a session the client tracks: as last tracked, and seq,
// which orders the sessions by when they were first tracked.
type trackedEntry struct {
	seq uint64
	s   protocol.TrackSession
}

func trackKey(user, device string) string { return user + "\x1f" + device }

// retrack tracks again, on cn (a connection that replaced a lost one),
// every session the client tracks, in the order they were first tracked.
// It gives up when cn ends (the next connection tracks them again) or the
// client stops.
func (c *Client) retrack(cn *conn) {
	c.trackMu.Lock()
	defer c.trackMu.Unlock()
	c.mu.Lock()
	held := slices.SortedFunc(maps.Values(c.tracked), func(a, b trackedEntry) int { return cmp.Compare(a.seq, b.seq) })
	c.mu.Unlock()
	if len(held) == 0 {
		return
	}
	entries := make([]protocol.TrackSession, len(held))
	for i, e := range held {
		entries[i] = e.s
	}
	ctx, cancel := context.WithCancel(c.ctx)
	defer cancel()
	go func() {
		select {
		case <-cn.dead:
			cancel()
		case <-ctx.Done():
		}
	}()
	rs, err := c.trackAll(ctx, protocol.OpTrack, entries, cn)
	if err != nil {
		if ctx.Err() == nil && !errors.Is(err, errLost) {
			c.log.Warn("rollcall: tracking the sessions again after a reconnect failed", zap.String("gateway", cn.gateway),
				zap.Int("sessions", len(entries)), zap.Int("tracked", len(rs)), zap.Error(err))
		}
		return
	}
	refused := 0
	for i, r := range rs {
		if err := TrackErr(r); err != nil {
			refused++
			c.log.Warn("rollcall: the gateway refused a tracked session after a reconnect", zap.String("user", entries[i].User),
				zap.String("device", entries[i].Device), zap.Error(err))
		}
	}
	c.log.Info("rollcall: tracked the sessions again after a reconnect", zap.String("gateway", cn.gateway),
		zap.Int("sessions", len(rs)-refused), zap.Int("refused", refused))
}

// trackAll sends entries in requests of op that fit the per-request and
// per-line bounds, on cn (nil: the connection in use, waiting for one).
func (c *Client) trackAll(ctx context.Context, op string, entries []protocol.TrackSession, cn *conn) ([]TrackResult, error) {
	out := make([]TrackResult, 0, len(entries))
	for len(entries) > 0 {
		k, size := 0, 0
		for k < len(entries) && k < protocol.MaxTrackPerRequest {
			b, err := json.Marshal(entries[k])
			if err != nil {
				return out, fmt.Errorf("rollcall: %s: %w", op, err)
			}
			if k > 0 && size+len(b)+1 > trackLineBudget {
				break
			}
			size += len(b) + 1
			k++
		}
		rs, err := c.trackRequest(ctx, op, entries[:k], cn)
		if err != nil {
			return out, err
		}
		out = append(out, rs...)
		entries = entries[k:]
	}
	return out, nil
}

// trackRequest sends one track or untrack request, on cn (nil: the
// connection in use), waiting out rate_limited with a backoff until ctx
// ends.
func (c *Client) trackRequest(ctx context.Context, op string, entries []protocol.TrackSession, cn *conn) ([]TrackResult, error) {
	wait := 50 * time.Millisecond
	for {
		var r protocol.TrackReply
		req := protocol.Request{Op: op, Sessions: entries}
		var err error
		if cn == nil {
			err = c.call(ctx, req, false, &r)
		} else {
			var line []byte
			if line, err = cn.roundTrip(ctx, req); err == nil {
				if err = json.Unmarshal(line, &r); err != nil {
					err = fmt.Errorf("rollcall: bad %s reply: %w", op, err)
				}
			}
		}
		if err == nil {
			if len(r.Sessions) != len(entries) {
				return nil, fmt.Errorf("rollcall: %s: %d results for %d sessions", op, len(r.Sessions), len(entries))
			}
			return r.Sessions, nil
		}
		if !HasCode(err, protocol.CodeRateLimited) {
			return nil, err
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("rollcall: %s: %w (last: %v)", op, ctx.Err(), err)
		}
		wait = min(2*wait, 2*time.Second)
	}
}
