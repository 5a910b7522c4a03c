package node

import (
	"encoding/json"
	"slices"

	"github.com/rollcall/rollcall/crdt"

	"github.com/rollcall/rollcall/protocol"
)

// Queries answer from this node's replica: the local projection of the
// whole cluster, which may lag other gateways by the dissemination delay.

// handleGet returns the presence of each requested user, in request order
// (a user named more than once, at its first place only).
func (n *Node) handleGet(c *conn, req *protocol.Request) (any, *requestError) {
	if len(req.Users) == 0 {
		return nil, errorf(protocol.CodeBadRequest, "want users")
	}
	if len(req.Users) > protocol.MaxUsersPerRequest {
		return nil, errorf(protocol.CodeBadRequest, "at most %d users per request", protocol.MaxUsersPerRequest)
	}
	// A user named more than once is answered once, at its first place:
	// a request naming one user a thousand times costs one lookup.
	users := firstOccurrences(req.Users)
	for _, u := range users {
		if rerr := checkName("user", u); rerr != nil {
			return nil, rerr
		}
	}
	if rerr := checkRead(c, users); rerr != nil {
		return nil, rerr
	}
	out := make([]protocol.Presence, 0, len(users))
	who := c.viewer()
	lk := lockOf(&n.mu)
	defer lk.unlock()
	n.underLockHook(req)
	v := n.nextVersionLocked()
	for _, u := range users {
		out = append(out, presenceJSON(who.view(n.replica.Presence(u, n.clock.Now().UnixNano())), v))
	}
	lk.unlock()
	return protocol.PresenceReply{Op: protocol.OpPresence, ID: req.ID, Users: out}, nil
}

// firstOccurrences returns s without repeats, in the order each first
// appears; s itself when it has none.
func firstOccurrences(s []string) []string {
	seen := make(map[string]struct{}, len(s))
	var out []string // nil until the first repeat
	for i, v := range s {
		if _, dup := seen[v]; dup {
			if out == nil {
				out = slices.Clone(s[:i])
			}
			continue
		}
		seen[v] = struct{}{}
		if out != nil {
			out = append(out, v)
		}
	}
	if out == nil {
		return s
	}
	return out
}

// handleGroup returns a page of a group's online members (groupPage),
// cut shorter to fit half the outbound queue's byte bound, so a reply
// never makes a prompt reader a slow consumer however large the group.
func (n *Node) handleGroup(c *conn, req *protocol.Request) (any, *requestError) {
	limit := protocol.DefaultGroupPage
	if req.Limit != nil {
		limit = *req.Limit
	}
	if rerr := checkGroupPage(req.Group, req.Cursor, limit); rerr != nil {
		return nil, rerr
	}
	if rerr := checkReadGroup(c, req.Group); rerr != nil {
		return nil, rerr
	}
	// The reply's own fields: its group and next (a user name) escaped at
	// worst (\u003c for <), the id, the rest.
	budget := n.cfg.OutboundQueueBytes/2 - (128 + len(req.ID) + 6*len(req.Group) + 6*protocol.MaxNameLen)
	online, members, next, rerr := n.groupPage(req.Group, req.Cursor, limit, budget, c.viewer(), func() { n.underLockHook(req) })
	if rerr != nil {
		return nil, rerr
	}
	return protocol.GroupReply{Op: protocol.OpGroup, ID: req.ID, Group: req.Group, Online: online, Members: members, Next: next}, nil
}

// checkGroupPage validates a group page's request: the group's name, a
// cursor (empty, or a user name) and a limit of 0 to MaxGroupPage.
func checkGroupPage(group, cursor string, limit int) *requestError {
	if rerr := checkName("group", group); rerr != nil {
		return rerr
	}
	if limit < 0 || limit > protocol.MaxGroupPage {
		return errorf(protocol.CodeBadRequest, "limit must be 0 to %d", protocol.MaxGroupPage)
	}
	if cursor != "" {
		if rerr := checkName("cursor", cursor); rerr != nil {
			return rerr
		}
	}
	return nil
}

// groupPage returns a page of a group's online members, in user-name
// order, after cursor (a user name: the previous page's last), with the
// count of every online member. A page holds at most limit members, and is
// cut shorter to fit budget bytes of JSON (always one member at least);
// next is the page's last member when more follow, else empty. A limit of
// 0 asks for the count alone, which reads no member's presence. The
// members and the count are those who sees (invisible.go). underLock,
// when set, runs under mu (a test seam). The group, cursor and limit are
// checked by checkGroupPage.
func (n *Node) groupPage(group, cursor string, limit, budget int, who viewer, underLock func()) (online int, members []protocol.Presence, next string, rerr *requestError) {
	members = []protocol.Presence{}
	lk := lockOf(&n.mu)
	defer lk.unlock()
	if underLock != nil {
		underLock()
	}
	if limit == 0 {
		return n.visibleGroupCountLocked(group, who), members, "", nil
	}
	v := n.nextVersionLocked()
	users := n.visibleGroupMembersLocked(group, who)
	online = len(users)
	// The members after the cursor.
	i, found := slices.BinarySearch(users, cursor)
	if found {
		i++
	}
	users = users[i:]
	now := n.clock.Now().UnixNano()
	members = make([]protocol.Presence, 0, min(limit, len(users)))
	for _, u := range users[:min(limit, len(users))] {
		members = append(members, presenceJSON(who.view(n.replica.Presence(u, now)), v))
	}
	lk.unlock()
	// Cut the page to its byte budget (always one member at least).
	size, k := 0, 0
	for k < len(members) {
		b, err := json.Marshal(members[k])
		if err != nil {
			return 0, nil, "", errorf(protocol.CodeInternal, "encode: %v", err)
		}
		size += len(b) + 1
		if k > 0 && size > budget {
			break
		}
		k++
	}
	members = members[:k]
	if k < len(users) {
		next = members[k-1].User
	}
	return online, members, next, nil
}

// handleLocate returns a user's active sessions, with their gateways: none
// of an invisible user the reader does not see (invisible.go).
func (n *Node) handleLocate(c *conn, req *protocol.Request) (any, *requestError) {
	if rerr := checkName("user", req.User); rerr != nil {
		return nil, rerr
	}
	if rerr := checkRead(c, []string{req.User}); rerr != nil {
		return nil, rerr
	}
	who := c.viewer()
	lk := lockOf(&n.mu)
	defer lk.unlock()
	var sessions []crdt.Session
	if who.sees(req.User) || !n.replica.Invisible(req.User, n.clock.Now().UnixNano()) {
		sessions = n.activeSessionsLocked(req.User)
	}
	lk.unlock()
	book, _ := n.getCluster().(AddressBook)
	out := make([]protocol.SessionInfo, 0, len(sessions))
	for _, s := range sessions {
		info := protocol.SessionInfo{Session: s.ID, Device: s.Device, Epoch: s.Epoch, Gateway: s.Gateway, Status: s.Status.String(),
			Meta: rawObject(s.Meta), Info: rawObject(s.Info)}
		switch {
		case s.Gateway == n.cfg.Name:
			info.GatewayAddr = n.AdvertisedClientAddr()
		case book != nil:
			info.GatewayAddr = book.ClientAddrOf(s.Gateway)
		}
		out = append(out, info)
	}
	return protocol.LocateReply{Op: protocol.OpLocate, ID: req.ID, User: req.User, Sessions: out}, nil
}

// activeSessionsLocked returns the user's sessions that are active in this
// node's projection (a gateway marked down shows its sessions expired).
func (n *Node) activeSessionsLocked(user string) []crdt.Session {
	all := n.replica.UserSessions(user)
	out := all[:0]
	for _, s := range all {
		if s.State == crdt.StateActive {
			out = append(out, s)
		}
	}
	return out
}

// AdvertisedClientAddr returns the client address this node tells clients
// and other gateways: Config.ClientAdvertise if set, else the address the
// cluster publishes for it, else the bound client address ("" before
// Start).
func (n *Node) AdvertisedClientAddr() string {
	if a := n.cfg.ClientAdvertise; a != "" {
		return a
	}
	if book, ok := n.getCluster().(AddressBook); ok {
		if a := book.ClientAddrOf(n.cfg.Name); a != "" {
			return a
		}
	}
	if n.ln != nil {
		return n.ln.Addr().String()
	}
	return ""
}
