package node

import (
	"strings"

	"github.com/rollcall/rollcall/auth"
	"github.com/rollcall/rollcall/protocol"
)

// Authorization: every request that reads another user's presence, joins a
// group or sends a message is checked against the session token's grants
// (auth.Grants, pure functions of the claim). A refused request gets
// forbidden, does nothing, and the connection stays:
//
//	get, locate, sub (users)   MayRead for each user
//	group, sub (group)         MayReadGroup
//	hello (groups), join       MayJoin for each group
//	send                       MaySend, with the recipient's online groups
//
// status, account, leave, unsub, hb, refresh and bye concern the session
// itself and need no grant. A --dev gateway gives every session
// auth.Unrestricted.

// sessionGrants returns c's grants; a session always has some once hello
// succeeded.
func (c *conn) sessionGrants() *auth.Grants {
	if g := c.grants.Load(); g != nil {
		return g
	}
	return &auth.Grants{}
}

// maxNamedRefusals bounds the names a forbidden message lists.
const maxNamedRefusals = 5

// checkRead refuses reading any of users that c's token does not allow.
func checkRead(c *conn, users []string) *requestError {
	return checkReadAs(c.sessionGrants(), c.sess.user, users)
}

// checkReadAs refuses reading any of users that grants g of user self do
// not allow.
func checkReadAs(g *auth.Grants, self string, users []string) *requestError {
	var refused []string
	n := 0
	for _, u := range users {
		if !g.MayRead(self, u) {
			if n < maxNamedRefusals {
				refused = append(refused, u)
			}
			n++
		}
	}
	if n == 0 {
		return nil
	}
	more := ""
	if n > len(refused) {
		more = " and " + utoa(uint64(n-len(refused))) + " more"
	}
	return errorf(protocol.CodeForbidden, "the token does not allow reading %s%s (grant user:NAME or * in rollcall.read)",
		strings.Join(refused, ", "), more)
}

// checkReadGroup refuses reading a group's view that c's token does not
// allow.
func checkReadGroup(c *conn, group string) *requestError {
	return checkReadGroupAs(c.sessionGrants(), group)
}

// checkReadGroupAs refuses reading a group's view that g does not allow.
func checkReadGroupAs(g *auth.Grants, group string) *requestError {
	if g.MayReadGroup(group) {
		return nil
	}
	return errorf(protocol.CodeForbidden, "the token does not allow reading group %s (grant group:%s or * in rollcall.read)", group, group)
}

// checkJoin refuses joining any of groups that g does not allow.
func checkJoin(g *auth.Grants, groups []string) *requestError {
	for _, gr := range groups {
		if !g.MayJoin(gr) {
			return errorf(protocol.CodeForbidden, "the token does not allow joining group %s (grant %s or * in rollcall.join)", gr, gr)
		}
	}
	return nil
}

// checkSend refuses a send to user that c's token does not allow;
// onlineGroups returns the groups of the recipient's active sessions and
// is called only when a group grant could decide.
func checkSend(c *conn, user string, onlineGroups func() []string) *requestError {
	g := c.sessionGrants()
	if g.MaySend(user, nil) || g.MaySend(user, onlineGroups()) {
		return nil
	}
	return errorf(protocol.CodeForbidden, "the token does not allow sending to %s (grant user:%s, a group:NAME it is online in, or * in rollcall.send)", user, user)
}
