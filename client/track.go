package client

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

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
// the connection closes or goes silent, every session it tracks ends; after
// a reconnect (Config.OnState reports one) track them again. A session
// already tracked by this connection is set anew: its status, groups and
// meta, keeping its id and epoch.
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
		entries[i] = protocol.TrackSession{User: s.User, Device: s.Device, Status: s.Status, Groups: s.Groups, Meta: meta}
	}
	return c.trackAll(ctx, protocol.OpTrack, entries)
}

// Untrack ends sessions this client's connection tracks, disconnected, and
// returns their ids and epochs in sessions' order (neither for one it did
// not track). It splits and retries as Track does.
func (c *Client) Untrack(ctx context.Context, sessions []Tracked) ([]TrackResult, error) {
	entries := make([]protocol.TrackSession, len(sessions))
	for i, s := range sessions {
		entries[i] = protocol.TrackSession{User: s.User, Device: s.Device}
	}
	return c.trackAll(ctx, protocol.OpUntrack, entries)
}

// trackAll sends entries in requests of op that fit the per-request and
// per-line bounds.
func (c *Client) trackAll(ctx context.Context, op string, entries []protocol.TrackSession) ([]TrackResult, error) {
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
		rs, err := c.trackRequest(ctx, op, entries[:k])
		if err != nil {
			return out, err
		}
		out = append(out, rs...)
		entries = entries[k:]
	}
	return out, nil
}

// trackRequest sends one track or untrack request, waiting out
// rate_limited with a backoff until ctx ends.
func (c *Client) trackRequest(ctx context.Context, op string, entries []protocol.TrackSession) ([]TrackResult, error) {
	wait := 50 * time.Millisecond
	for {
		var r protocol.TrackReply
		err := c.call(ctx, protocol.Request{Op: op, Sessions: entries}, false, &r)
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
