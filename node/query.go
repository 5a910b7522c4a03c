package node

import (
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
	n.mu.Lock()
	v := n.nextVersionLocked()
	for _, u := range users {
		out = append(out, presenceJSON(n.replica.Presence(u, n.clock.Now().UnixNano()), v))
	}
	n.mu.Unlock()
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

// handleGroup returns a group's online members.
func (n *Node) handleGroup(c *conn, req *protocol.Request) (any, *requestError) {
	if rerr := checkName("group", req.Group); rerr != nil {
		return nil, rerr
	}
	if rerr := checkReadGroup(c, req.Group); rerr != nil {
		return nil, rerr
	}
	n.mu.Lock()
	v := n.nextVersionLocked()
	users := n.replica.GroupOnlineUsers(req.Group)
	members := make([]protocol.Presence, 0, len(users))
	for _, u := range users {
		members = append(members, presenceJSON(n.replica.Presence(u, n.clock.Now().UnixNano()), v))
	}
	n.mu.Unlock()
	return protocol.GroupReply{Op: protocol.OpGroup, ID: req.ID, Group: req.Group, Online: len(members), Members: members}, nil
}

// handleLocate returns a user's active sessions, with their gateways.
func (n *Node) handleLocate(c *conn, req *protocol.Request) (any, *requestError) {
	if rerr := checkName("user", req.User); rerr != nil {
		return nil, rerr
	}
	if rerr := checkRead(c, []string{req.User}); rerr != nil {
		return nil, rerr
	}
	n.mu.Lock()
	sessions := n.activeSessionsLocked(req.User)
	n.mu.Unlock()
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
