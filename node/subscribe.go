package node

import (
	"maps"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/rollcall/rollcall/crdt"
	"github.com/rollcall/rollcall/protocol"
	"github.com/rollcall/rollcall/webhook"
)

// Subscriptions and events.
//
// Every change to the replica marks its users dirty (markDirtyLocked): local
// writes, remote deltas, anti-entropy, gateways marked down or up. The
// notifier goroutine wakes and flushes, Nagle-style (eventWindow): at once
// when no flush happened in the last EventCoalesce, else at the end of the
// window the last flush opened, so a burst collapses into one pass per
// window and an isolated change waits for nothing. A flush takes each dirty
// user in sorted order, compares the presence with the last one it emitted
// and the user's membership of watched groups with the last it emitted,
// and queues an event for each subscriber that should see a difference (as
// the subscriber sees the user: invisible.go). Nothing is emitted for a change that made no
// visible difference (a heartbeat never even marks a user dirty).
//
// Versions come from one node-wide counter, taken under mu at the moment a
// presence is read (a flush, a sub's snapshot, a get), and raised to at
// least the clock in microseconds, so they also tend to grow across gateway
// restarts. Frames are queued in version order because the flush and the sub
// snapshot both hand off from mu to fanMu before queueing: within one
// connection every user's versions strictly increase.

// userWatch is what the notifier knows about a watched user. Guarded by mu.
type userWatch struct {
	subs   map[subscriber]struct{} // connections and event streams subscribed to the user directly
	groups map[string]struct{}     // watched groups the user was last seen online in
	last   crdt.Presence           // the presence last emitted (or snapshotted)
}

// groupWatch is a watched group. Guarded by mu.
type groupWatch struct {
	subs    map[subscriber]struct{}
	members map[string]struct{} // users whose userWatch.groups holds this group
}

// subscriber is what a watch delivers events to: a protocol connection
// (conn) or an HTTP event stream (eventStream, events.go). deliver queues
// one encoded event frame of the given version without blocking and
// reports whether it was queued; a subscriber that cannot keep up closes
// itself (a slow consumer).
type subscriber interface {
	deliver(frame []byte, version uint64) bool
	// viewer is who reads the events (invisible.go).
	viewer() viewer
}

// deliver queues an event frame on the connection (send).
func (c *conn) deliver(frame []byte, _ uint64) bool { return c.send(frame) }

// delivery is one frame for one subscriber.
type delivery struct {
	c       subscriber
	frame   []byte
	version uint64
}

// markDirtyLocked notes that user's presence may have changed.
func (n *Node) markDirtyLocked(user string) {
	n.dirty[user] = struct{}{}
}

// nextVersionLocked returns a fresh presence version.
func (n *Node) nextVersionLocked() uint64 {
	v := max(n.version+1, uint64(max(n.clock.Now().UnixMicro(), 0)))
	n.version = v
	return v
}

// handleSub subscribes the connection to users and/or a group. It queues
// the ok itself, saying how many snapshot events follow, ahead of any
// change event, and leaves the snapshot to c's reader (c.snap): the
// current presence of each user named and each online member of the
// group, sent in pages within the queue's bound (snapshotPage) before the
// reader handles the next request.
func (n *Node) handleSub(c *conn, req *protocol.Request) *requestError {
	if rerr := checkSubjects(req); rerr != nil {
		return rerr
	}
	if rerr := checkRead(c, req.Users); rerr != nil {
		return rerr
	}
	if req.Group != "" {
		if rerr := checkReadGroup(c, req.Group); rerr != nil {
			return rerr
		}
	}
	lk := lockOf(&n.mu)
	defer lk.unlock()
	n.underLockHook(req)
	if _, rerr := n.ownedLocked(c); rerr != nil {
		return rerr
	}
	added := 0
	for _, u := range req.Users {
		if _, ok := c.subUsers[u]; !ok {
			added++
		}
	}
	if req.Group != "" {
		if _, ok := c.subGroups[req.Group]; !ok {
			added++
		}
	}
	if len(c.subUsers)+len(c.subGroups)+added > protocol.MaxSubscriptions {
		return errorf(protocol.CodeBadRequest, "at most %d subscriptions per connection", protocol.MaxSubscriptions)
	}
	snap := &subSnapshot{users: uniqueStrings(req.Users), group: req.Group}
	for _, u := range snap.users {
		if c.subUsers == nil {
			c.subUsers = make(map[string]struct{})
		}
		c.subUsers[u] = struct{}{}
		n.watchUserLocked(u).subs[c] = struct{}{}
	}
	if g := req.Group; g != "" {
		if c.subGroups == nil {
			c.subGroups = make(map[string]struct{})
		}
		c.subGroups[g] = struct{}{}
		n.watchGroupLocked(g).subs[c] = struct{}{}
		snap.members = n.visibleGroupMembersLocked(g, c.viewer())
	}
	snap.left = len(snap.users) + len(snap.members)
	// The ok goes out ahead of every event of the new subjects: a flush
	// that sees them queues its events after it (the hand-off from mu to
	// fanMu).
	fk := lockOf(&n.fanMu)
	defer fk.unlock()
	lk.unlock()
	left := snap.left
	c.send(encodeLine(protocol.OK{Op: protocol.OpOK, ID: req.ID, Snapshot: &left}))
	fk.unlock()
	if snap.left > 0 {
		c.snap = snap
	}
	return nil
}

// subSnapshot is what is left to send of a sub's snapshot: the users it
// named and the group's online members when it subscribed, each read
// afresh when its page is sent.
type subSnapshot struct {
	users   []string // sorted
	group   string
	members []string // sorted
	left    int      // events still to send
}

// snapshotPage queues the next page of c's snapshot (c.snap), and reports
// whether it did: false once the connection is closing, whose snapshot is
// then dropped. A page is at most a quarter of the queue's frame and byte
// bounds (one event at least), and the reader queues one only while the
// queue is below half its bound (sendSnapshotPages), so a page never
// overflows the queue of a prompt reader, with room left for the change
// events that come meanwhile.
//
// Each page reads its users' presence afresh, at a fresh version, under mu,
// and is queued under fanMu, as a flush hands off its events: so events and
// pages reach the connection in version order. A change event for a
// subject whose page is still to come precedes it, and the page, read
// later, holds that change or a newer state; a change after a page was
// read comes after it. Nothing is lost (the subjects are watched from the
// sub on), and a subject's versions still only grow. A group member listed
// at the sub who is no longer an online member when its page is read (or
// whom the connection no longer sees: invisible.go) gets "member":false.
func (n *Node) snapshotPage(c *conn) (sent bool) {
	defer c.recoverRequest(&sent)
	s := c.snap
	if c.state.Load() == stateClosing {
		c.snap = nil
		return false
	}
	maxFrames, maxBytes := max(1, n.cfg.OutboundQueue/4), max(1, n.cfg.OutboundQueueBytes/4)
	lk := lockOf(&n.mu)
	defer lk.unlock()
	version := n.nextVersionLocked()
	now := n.clock.Now().UnixNano()
	v := c.viewer()
	var frames [][]byte
	size := 0
	for s.left > 0 && len(frames) < maxFrames {
		var f []byte
		if len(s.users) > 0 {
			f = encodeSnapshotEvent(v.view(n.replica.Presence(s.users[0], now)), version, "", nil, s.left > 1)
		} else {
			p := n.replica.Presence(s.members[0], now)
			member := n.onlineInGroupLocked(s.members[0], s.group) && (!p.Invisible || v.sees(p.User))
			f = encodeSnapshotEvent(v.view(p), version, s.group, &member, s.left > 1)
		}
		if len(frames) > 0 && size+len(f) > maxBytes {
			break
		}
		frames = append(frames, f)
		size += len(f)
		if len(s.users) > 0 {
			s.users = s.users[1:]
		} else {
			s.members = s.members[1:]
		}
		s.left--
	}
	fk := lockOf(&n.fanMu)
	defer fk.unlock()
	lk.unlock()
	c.sendAll(frames)
	fk.unlock()
	if s.left == 0 {
		c.snap = nil
	}
	return true
}

// onlineInGroupLocked reports whether u is an online member of g: one of
// u's active sessions is in it.
func (n *Node) onlineInGroupLocked(u, g string) bool {
	for _, s := range n.replica.UserSessions(u) {
		if s.State == crdt.StateActive && slices.Contains(s.Groups, g) {
			return true
		}
	}
	return false
}

// handleUnsub removes subscriptions. Unknown subjects are ignored.
func (n *Node) handleUnsub(c *conn, req *protocol.Request) (any, *requestError) {
	if rerr := checkSubjects(req); rerr != nil {
		return nil, rerr
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, rerr := n.ownedLocked(c); rerr != nil {
		return nil, rerr
	}
	for _, u := range req.Users {
		if _, ok := c.subUsers[u]; ok {
			delete(c.subUsers, u)
			n.unwatchUserLocked(u, c)
		}
	}
	if g := req.Group; g != "" {
		if _, ok := c.subGroups[g]; ok {
			delete(c.subGroups, g)
			n.unwatchGroupLocked(g, c)
		}
	}
	return protocol.OK{Op: protocol.OpOK, ID: req.ID}, nil
}

func checkSubjects(req *protocol.Request) *requestError {
	if len(req.Users) == 0 && req.Group == "" {
		return errorf(protocol.CodeBadRequest, "want users and/or group")
	}
	if len(req.Users) > protocol.MaxUsersPerRequest {
		return errorf(protocol.CodeBadRequest, "at most %d users per request", protocol.MaxUsersPerRequest)
	}
	for _, u := range req.Users {
		if rerr := checkName("user", u); rerr != nil {
			return rerr
		}
	}
	if req.Group != "" {
		if rerr := checkName("group", req.Group); rerr != nil {
			return rerr
		}
	}
	return nil
}

// dropSubsLocked removes every subscription of a closing connection.
func (n *Node) dropSubsLocked(c *conn) {
	for u := range c.subUsers {
		n.unwatchUserLocked(u, c)
	}
	for g := range c.subGroups {
		n.unwatchGroupLocked(g, c)
	}
	c.subUsers, c.subGroups = nil, nil
}

// watchUserLocked returns u's watch, creating it from the replica.
func (n *Node) watchUserLocked(u string) *userWatch {
	uw := n.users[u]
	if uw == nil {
		uw = &userWatch{
			subs:   make(map[subscriber]struct{}),
			groups: make(map[string]struct{}),
			last:   n.replica.Presence(u, n.clock.Now().UnixNano()),
		}
		n.users[u] = uw
	}
	return uw
}

func (n *Node) unwatchUserLocked(u string, c subscriber) {
	uw := n.users[u]
	if uw == nil {
		return
	}
	delete(uw.subs, c)
	n.gcUserWatchLocked(u, uw)
}

func (n *Node) gcUserWatchLocked(u string, uw *userWatch) {
	if len(uw.subs) == 0 && len(uw.groups) == 0 {
		delete(n.users, u)
	}
}

// watchGroupLocked returns g's watch, creating it (and the watches of its
// online members) from the replica.
func (n *Node) watchGroupLocked(g string) *groupWatch {
	gw := n.groups[g]
	if gw == nil {
		gw = &groupWatch{subs: make(map[subscriber]struct{}), members: make(map[string]struct{})}
		n.groups[g] = gw
		for _, u := range n.replica.GroupOnlineUsers(g) {
			n.watchUserLocked(u).groups[g] = struct{}{}
			gw.members[u] = struct{}{}
		}
	}
	return gw
}

func (n *Node) unwatchGroupLocked(g string, c subscriber) {
	gw := n.groups[g]
	if gw == nil {
		return
	}
	delete(gw.subs, c)
	if len(gw.subs) > 0 {
		return
	}
	delete(n.groups, g)
	for u := range gw.members {
		if uw := n.users[u]; uw != nil {
			delete(uw.groups, g)
			n.gcUserWatchLocked(u, uw)
		}
	}
}

// eventWindow is the event-coalescing window, Nagle-style: a flush opens a
// window of EventCoalesce, a change noticed outside every window is
// flushed at once, and the changes noticed within one wait for its end and
// are flushed together. Times are the node's Clock.
type eventWindow struct {
	length  time.Duration
	quietAt time.Time // the end of the window the last flush opened; zero: none
}

// wait is how long a change noticed at now waits for its flush: 0 outside a
// window, never more than one window (even after the clock stepped back).
func (w *eventWindow) wait(now time.Time) time.Duration {
	if w.length <= 0 || w.quietAt.IsZero() {
		return 0
	}
	return min(max(w.quietAt.Sub(now), 0), w.length)
}

// flushed opens a window at now.
func (w *eventWindow) flushed(now time.Time) { w.quietAt = now.Add(w.length) }

// notifyLoop flushes presence changes to subscribers: at once when no flush
// opened a window in the last EventCoalesce, else at that window's end.
func (n *Node) notifyLoop() {
	defer n.loops.Done()
	win := eventWindow{length: n.cfg.EventCoalesce}
	for {
		select {
		case <-n.done:
			return
		case <-n.notify:
		}
		if !n.hasDirty() {
			continue // a wake-up for changes a flush already took
		}
		if d := win.wait(n.clock.Now()); d > 0 {
			select {
			case <-n.done:
				return
			case <-n.eventAfter(d):
			}
		}
		at := n.clock.Now()
		if n.flushEvents() {
			win.flushed(at)
		}
	}
}

// hasDirty reports whether presence changes wait for a flush.
func (n *Node) hasDirty() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.dirty) > 0
}

// flushEvents emits the events for every dirty user, and reports whether
// there were any.
func (n *Node) flushEvents() bool {
	if n.hooks != nil {
		n.watchWebhookMembers() // the view the decisions below use
	}
	n.mu.Lock()
	if len(n.dirty) == 0 {
		n.mu.Unlock()
		return false
	}
	dirty := slices.Sorted(maps.Keys(n.dirty))
	clear(n.dirty)
	var out []delivery
	var changes []PresenceChange // for the status page's feed (feed.go)
	if n.feed != nil {
		changes = make([]PresenceChange, 0, len(dirty))
	}
	var version uint64
	var hooked []*webhook.Event // webhooks this node sends (webhook.go)
	for _, u := range dirty {
		var cur crdt.Presence
		read := false
		if n.hooks != nil {
			cur, read = n.replica.Presence(u, n.clock.Now().UnixNano()), true
			hooked = n.decideWebhookLocked(cur, n.clock.Now().UnixNano(), hooked)
		}
		if n.feed != nil {
			if !read {
				cur, read = n.replica.Presence(u, n.clock.Now().UnixNano()), true
			}
			if ch, ok := n.feedChangeLocked(cur.Public()); ok {
				if version == 0 {
					version = n.nextVersionLocked()
				}
				ch.Version = version
				changes = append(changes, ch)
			}
		}
		uw := n.users[u]
		now := n.watchedGroupsOfLocked(u)
		if uw == nil && len(now) == 0 {
			continue
		}
		if uw == nil {
			uw = n.watchUserLocked(u)
			uw.last = crdt.Presence{User: u} // new to every group view
		}
		if !read {
			cur = n.replica.Presence(u, n.clock.Now().UnixNano())
		}
		changed := !cur.Equal(uw.last)
		if version == 0 && (changed || len(now) > 0 || len(uw.groups) > 0) {
			version = n.nextVersionLocked()
		}
		// While the user is (or was) invisible, the subscribers that do not
		// see the user compare the public presence (invisible.go).
		hiding := cur.Invisible || uw.last.Invisible
		pub, pubChanged := cur, changed
		if hiding {
			pub = cur.Public()
			pubChanged = !pub.Equal(uw.last.Public())
		}
		if changed && len(uw.subs) > 0 {
			ef := eventFrames{version: version, truth: cur, public: pub, sendTruth: true, sendPublic: pubChanged}
			for c := range uw.subs {
				if f := ef.frameFor(!hiding || c.viewer().sees(u)); f != nil {
					out = append(out, delivery{c, f, version})
				}
			}
		}
		for _, g := range unionKeys(uw.groups, now) {
			_, was := uw.groups[g]
			_, is := now[g]
			wasPublic, isPublic := was && !uw.last.Invisible, is && !cur.Invisible
			ef := eventFrames{version: version, group: g, truth: cur, public: pub, isIn: is, isInPublic: isPublic,
				sendTruth:  was != is || (is && changed),
				sendPublic: wasPublic != isPublic || (isPublic && pubChanged)}
			if !ef.sendTruth && !ef.sendPublic {
				continue
			}
			gw := n.groups[g]
			if gw == nil {
				continue
			}
			for c := range gw.subs {
				if f := ef.frameFor(!hiding || c.viewer().sees(u)); f != nil {
					out = append(out, delivery{c, f, version})
				}
			}
		}
		uw.last = cur
		for g := range uw.groups {
			if _, ok := now[g]; !ok {
				if gw := n.groups[g]; gw != nil {
					delete(gw.members, u)
				}
			}
		}
		for g := range now {
			n.groups[g].members[u] = struct{}{}
		}
		uw.groups = now
		n.gcUserWatchLocked(u, uw)
	}
	// Every dirty user goes in the change log, so an event stream can
	// resume from a version (events.go); a pass that emitted nothing still
	// takes a version for it.
	if version == 0 {
		version = n.nextVersionLocked()
	}
	n.changes.add(version, dirty)
	n.fanMu.Lock()
	n.mu.Unlock()
	for _, d := range out {
		if d.c.deliver(d.frame, d.version) {
			n.stats.events.Add(1)
		} else {
			n.stats.m.eventsDropped.Add(1)
		}
	}
	if len(changes) > 0 {
		at := n.clock.Now()
		for i := range changes {
			changes[i].Time = at
		}
		n.feed.publish(changes)
	}
	if len(hooked) > 0 {
		n.sendWebhooks(hooked)
	}
	n.fanMu.Unlock()
	if len(out) > 0 {
		n.log.Debug("events flushed", zap.Int("users", len(dirty)), zap.Int("frames", len(out)))
	}
	return true
}

// watchedGroupsOfLocked returns the watched groups u is online in now.
func (n *Node) watchedGroupsOfLocked(u string) map[string]struct{} {
	out := make(map[string]struct{})
	if len(n.groups) == 0 {
		return out
	}
	for _, s := range n.replica.UserSessions(u) {
		if s.State != crdt.StateActive {
			continue
		}
		for _, g := range s.Groups {
			if _, ok := n.groups[g]; ok {
				out[g] = struct{}{}
			}
		}
	}
	return out
}

func unionKeys(a, b map[string]struct{}) []string {
	keys := make([]string, 0, len(a)+len(b))
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

func uniqueStrings(s []string) []string {
	return slices.Compact(slices.Sorted(slices.Values(s)))
}

// presenceJSON converts a crdt aggregate to its wire form.
func presenceJSON(p crdt.Presence, version uint64) protocol.Presence {
	out := protocol.Presence{User: p.User, Online: p.Online, Status: p.Status.String(),
		Sessions: make([]protocol.SessionInfo, 0, len(p.Sessions)), Version: version}
	for _, s := range p.Sessions {
		out.Sessions = append(out.Sessions, protocol.SessionInfo{
			Session: s.Session, Device: s.Device, Epoch: s.Epoch, Gateway: s.Gateway, Status: s.Status.String(),
			Meta: rawObject(s.Meta), Info: rawObject(s.Info),
		})
	}
	out.Text, out.Emoji, out.Invisible = p.Text, p.Emoji, p.Invisible
	if p.Until != 0 {
		out.Until = formatUnixNano(p.Until)
	}
	if p.LastSeen != 0 {
		out.LastSeen = formatUnixNano(p.LastSeen)
	}
	return out
}

func encodeEvent(p crdt.Presence, version uint64, group string, member *bool) []byte {
	return encodeLine(protocol.Event{Op: protocol.OpEvent, Presence: presenceJSON(p, version), Group: group, Member: member})
}

// encodeSnapshotEvent encodes an event of a sub's snapshot; more, when
// other snapshot events of the sub follow it.
func encodeSnapshotEvent(p crdt.Presence, version uint64, group string, member *bool, more bool) []byte {
	return encodeLine(protocol.Event{Op: protocol.OpEvent, Presence: presenceJSON(p, version), Group: group, Member: member,
		Snapshot: true, More: more})
}

// encodeLine encodes a protocol value as one line. The values are plain
// structs of strings, numbers and validated raw JSON, so encoding cannot
// fail; if it ever did, the line would be an internal error.
func encodeLine(v any) []byte {
	b, err := protocol.Marshal(v)
	if err != nil {
		return encodeError(nil, protocol.CodeInternal, "encode: "+err.Error())
	}
	return b
}
