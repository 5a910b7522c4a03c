package node

import (
	"net/http"
	"slices"

	"github.com/rollcall/rollcall/crdt"
)

// Invisible users (docs/protocol.md, "Invisible"). An account whose
// override is invisible (crdt.OverrideInvisible, until it lapses) shows
// its user offline to every reader but the user and backends: each read
// path passes the replica's presence through the reader's viewer, which
// gives crdt.Presence.Public to a reader that does not see the user.
//
//	get, HTTP presence   viewer.view of each user
//	group                the members the viewer sees (visibleGroupMembersLocked)
//	                     and their count (visibleGroupCountLocked)
//	locate               no sessions
//	sub, /v1/events      snapshots as get and group; flushEvents compares
//	                     the public presence with the last public one for
//	                     the subscribers that do not see the user, so going
//	                     invisible reaches them as going offline ("member":
//	                     false in a group's view), leaving it as coming
//	                     online, and nothing in between
//	send                 delivered counts no session of a recipient the
//	                     sender does not see (the message is delivered),
//	                     and a send grant of groups only is checked against
//	                     none of its groups: refused, as for an offline user
//	status page feed     the public presence, whoever reads the page
//
// It is a visibility rule, not a secret from operators: the replica holds
// the truth, gossip carries it, and the admin token, backend tokens,
// metrics and the node-wide views (/v1/sessions, /v1/stats, the status
// page's summary) count and list invisible users' sessions.

// viewer is who reads a presence.
type viewer struct {
	// user is the reader's user: it sees itself as it is. "" for none (an
	// HTTP reader without a client token).
	user string
	// all is true for a reader that sees every user as it is: a backend
	// token, the admin token.
	all bool
}

// sees reports whether v sees user as it is, invisible or not.
func (v viewer) sees(user string) bool { return v.all || (v.user != "" && v.user == user) }

// view returns p as v sees it.
func (v viewer) view(p crdt.Presence) crdt.Presence {
	if p.Invisible && !v.sees(p.User) {
		return p.Public()
	}
	return p
}

// viewer is the session's user, with its token's backend grant. A --dev
// gateway's sessions hold every grant (auth.Unrestricted), the backend's
// included, so they may track sessions; they see invisible users as
// other readers do (offline), or the demo could not show the rule. A
// connection without a session (none reads before hello) is no one.
func (c *conn) viewer() viewer {
	v := viewer{all: c.sessionGrants().Backend() && !c.n.cfg.Dev}
	if s := c.sess; s != nil {
		v.user = s.user
	}
	return v
}

// viewer is the stream's reader, fixed when it opened.
func (s *eventStream) viewer() viewer { return s.who }

// httpViewer is the reader of an HTTP request: the admin token sees all,
// a client token is its user (and sees all if a backend's), and a request
// without either (allowed on a --dev gateway) is no one.
func (n *Node) httpViewer(r *http.Request) viewer {
	if n.isAdmin(r) {
		return viewer{all: true}
	}
	if id, ok := n.clientIdentity(bearerToken(r)); ok {
		return viewer{user: id.User, all: id.Grants.Backend()}
	}
	return viewer{}
}

// visibleGroupMembersLocked returns the online members of group g that v
// sees, sorted: GroupOnlineUsers without the invisible ones other than v's
// user.
func (n *Node) visibleGroupMembersLocked(g string, v viewer) []string {
	users := n.replica.GroupOnlineUsers(g)
	if v.all || n.replica.InvisibleAccounts() == 0 {
		return users
	}
	hidden := n.replica.GroupInvisibleUsers(g, n.clock.Now().UnixNano())
	if len(hidden) == 0 {
		return users
	}
	return slices.DeleteFunc(users, func(u string) bool {
		_, found := slices.BinarySearch(hidden, u)
		return found && u != v.user
	})
}

// visibleGroupCountLocked returns how many online members of group g v
// sees: O(1) while no account is invisible, O(min(invisible accounts,
// members)) otherwise.
func (n *Node) visibleGroupCountLocked(g string, v viewer) int {
	count := n.replica.GroupOnlineCount(g)
	if v.all || n.replica.InvisibleAccounts() == 0 {
		return count
	}
	for _, u := range n.replica.GroupInvisibleUsers(g, n.clock.Now().UnixNano()) {
		if u != v.user {
			count--
		}
	}
	return count
}

// eventFrames encodes a flush's event of one user, for one subject (the
// user, or a group's view), at most once per view: the truth for the
// subscribers that see the user, the public presence for the rest.
type eventFrames struct {
	version          uint64
	group            string
	truth, public    crdt.Presence
	isIn, isInPublic bool // membership of the group's view
	sendTruth        bool // the truth changed for this subject
	sendPublic       bool // the public presence changed for this subject
	t, p             []byte
}

// frameFor returns the frame for a subscriber that sees the user as
// itself (sees) or not, or nil when it has nothing to learn.
func (e *eventFrames) frameFor(sees bool) []byte {
	var member *bool
	if sees {
		if !e.sendTruth {
			return nil
		}
		if e.t == nil {
			if e.group != "" {
				member = &e.isIn
			}
			e.t = encodeEvent(e.truth, e.version, e.group, member)
		}
		return e.t
	}
	if !e.sendPublic {
		return nil
	}
	if e.p == nil {
		if e.group != "" {
			member = &e.isInPublic
		}
		e.p = encodeEvent(e.public, e.version, e.group, member)
	}
	return e.p
}
