package client

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"

	"github.com/rollcall/rollcall/protocol"
)

// Event is a subscribed user's presence after a change. For a group
// subscription Group is set, and Member is false when the user left the
// group's online view; for a user subscription Member is true.
type Event struct {
	protocol.Presence
	Group  string
	Member bool
}

// Subscription is a stream of events for some users or one group. Its
// subjects are subscribed again after every reconnect; the first event of
// each subject after a (re)subscribe is its current presence.
type Subscription struct {
	c     *Client
	users []string
	group string
	ch    chan Event

	mu      sync.Mutex
	pending map[string]Event // newest undelivered event per subject
	order   []string         // subjects of pending, oldest first
	wake    chan struct{}
	ended   bool
	stopped chan struct{}
}

// Subscribe subscribes to users' presence. Events arrive on the returned
// Subscription's Events channel, first each user's current presence, then
// every change. An event is never older than one already delivered for the
// same user.
func (c *Client) Subscribe(ctx context.Context, users ...string) (*Subscription, error) {
	if len(users) == 0 {
		return nil, errors.New("rollcall: Subscribe needs a user")
	}
	return c.subscribe(ctx, slices.Clone(users), "")
}

// SubscribeGroup subscribes to the online members of a group.
func (c *Client) SubscribeGroup(ctx context.Context, group string) (*Subscription, error) {
	return c.subscribe(ctx, nil, group)
}

func (c *Client) subscribe(ctx context.Context, users []string, group string) (*Subscription, error) {
	s := &Subscription{c: c, users: users, group: group, ch: make(chan Event, c.cfg.EventBuffer),
		pending: map[string]Event{}, wake: make(chan struct{}, 1), stopped: make(chan struct{})}
	c.mu.Lock()
	if c.closing || c.ctx.Err() != nil {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	c.subs[s] = struct{}{}
	for _, u := range users {
		c.subUsers[u]++
	}
	if group != "" {
		c.subGroups[group]++
	}
	c.mu.Unlock()
	go s.pump()
	var err error
	if group != "" {
		err = c.call(ctx, protocol.Request{Op: protocol.OpSub, Group: group}, true, nil)
	} else {
		for chunk := range slices.Chunk(users, protocol.MaxUsersPerRequest) {
			if err = c.call(ctx, protocol.Request{Op: protocol.OpSub, Users: chunk}, true, nil); err != nil {
				break
			}
		}
	}
	if err != nil {
		s.release(context.WithoutCancel(ctx), false)
		return nil, err
	}
	return s, nil
}

// Events delivers the subscription's events. It is closed by Close and
// when the client stops.
func (s *Subscription) Events() <-chan Event { return s.ch }

// Close unsubscribes (subjects no other Subscription holds) and closes
// Events.
func (s *Subscription) Close(ctx context.Context) error {
	return s.release(ctx, true)
}

func (s *Subscription) release(ctx context.Context, unsub bool) error {
	c := s.c
	c.mu.Lock()
	if _, ok := c.subs[s]; !ok {
		c.mu.Unlock()
		return nil
	}
	delete(c.subs, s)
	var drop []string
	for _, u := range s.users {
		if c.subUsers[u]--; c.subUsers[u] <= 0 {
			delete(c.subUsers, u)
			drop = append(drop, u)
		}
	}
	dropGroup := false
	if s.group != "" {
		if c.subGroups[s.group]--; c.subGroups[s.group] <= 0 {
			delete(c.subGroups, s.group)
			dropGroup = true
		}
	}
	// what a later subscribe brings is its subjects' current presence,
	// with fresh versions: no need to remember these
	for _, u := range drop {
		delete(c.lastVer, subjectKey("", u))
	}
	if dropGroup {
		for k := range c.lastVer {
			if strings.HasPrefix(k, s.group+"\x00") {
				delete(c.lastVer, k)
			}
		}
	}
	running := !c.closing && c.ctx.Err() == nil
	c.mu.Unlock()
	s.end()
	if !unsub || !running {
		return nil
	}
	var err error
	for chunk := range slices.Chunk(drop, protocol.MaxUsersPerRequest) {
		if e := c.call(ctx, protocol.Request{Op: protocol.OpUnsub, Users: chunk}, true, nil); e != nil {
			err = e
		}
	}
	if dropGroup {
		if e := c.call(ctx, protocol.Request{Op: protocol.OpUnsub, Group: s.group}, true, nil); e != nil {
			err = e
		}
	}
	if errors.Is(err, ErrClosed) {
		err = nil
	}
	return err
}

func (s *Subscription) wants(group, user string) bool {
	if group != "" || s.group != "" {
		return group == s.group
	}
	return slices.Contains(s.users, user)
}

// push queues ev, replacing an undelivered older event of the same subject.
func (s *Subscription) push(key string, ev Event) {
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return
	}
	if _, ok := s.pending[key]; !ok {
		s.order = append(s.order, key)
	}
	s.pending[key] = ev
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// end stops the pump, which closes Events.
func (s *Subscription) end() {
	s.mu.Lock()
	if !s.ended {
		s.ended = true
		close(s.stopped)
	}
	s.mu.Unlock()
}

// pump moves pending events to Events, oldest subject first.
func (s *Subscription) pump() {
	defer close(s.ch)
	for {
		s.mu.Lock()
		if len(s.order) == 0 {
			s.mu.Unlock()
			select {
			case <-s.wake:
				continue
			case <-s.stopped:
				return
			}
		}
		key := s.order[0]
		ev := s.pending[key]
		s.mu.Unlock()
		select {
		case s.ch <- ev:
			s.mu.Lock()
			// a newer event of this subject may have replaced ev meanwhile
			if cur := s.pending[key]; cur.Version == ev.Version {
				delete(s.pending, key)
				s.order = s.order[1:]
			}
			s.mu.Unlock()
		case <-s.stopped:
			return
		}
	}
}
