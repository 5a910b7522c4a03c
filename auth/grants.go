package auth

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/rollcall/rollcall/protocol"
)

// ClaimName is the private claim that carries a token's grants.
const ClaimName = "rollcall"

// GrantsClaim is the "rollcall" claim as it appears in a token:
//
//	"rollcall": {"read": ["user:alice", "group:eng", "*"],
//	             "join": ["eng", "*"],
//	             "send": ["user:bob", "group:eng", "*"],
//	             "backend": true,
//	             "info": {"name": "Alice", "team": "eng"}}
//
// read and send entries are user:NAME, group:NAME or "*"; join entries are
// group names or "*". info is a JSON object the issuer vouches for, at
// most protocol.MaxInfoBytes once compacted: every session opened with
// the token shows it to readers of the user's presence. Every field is
// optional.
type GrantsClaim struct {
	Read    []string        `json:"read,omitempty"`
	Join    []string        `json:"join,omitempty"`
	Send    []string        `json:"send,omitempty"`
	Backend bool            `json:"backend,omitempty"`
	Info    json.RawMessage `json:"info,omitempty"`
}

// ParseInfo checks a rollcall.info claim and returns it compacted: a JSON
// object of at most protocol.MaxInfoBytes ("" for none or {}).
func ParseInfo(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil || b.Bytes()[0] != '{' {
		return "", errors.New("rollcall.info is not a JSON object")
	}
	if b.Len() > protocol.MaxInfoBytes {
		return "", fmt.Errorf("rollcall.info of %d bytes (compacted) is over the limit of %d", b.Len(), protocol.MaxInfoBytes)
	}
	if b.Len() == 2 {
		return "", nil
	}
	return b.String(), nil
}

// MaxGrantNameLen bounds the user or group name of one grant entry, in
// bytes (as the protocol's names).
const MaxGrantNameLen = 256

// Grants is what a verified token allows, besides being its user. The zero
// Grants is a token without the claim: it may read only its own user, join
// no group and send to nobody. Immutable; safe for concurrent use.
//
// The checks are pure functions of the grants and their arguments:
//
//	read (get, sub of users, locate)  MayRead: the user is the token's own,
//	                                  or read has user:NAME or "*", or backend
//	read (group, sub of a group)      MayReadGroup: read has group:NAME or
//	                                  "*", or backend
//	join (hello's groups, join)       MayJoin: join has NAME or "*"
//	send                              MaySend: send has user:NAME or "*", or
//	                                  group:G for a group G the recipient is
//	                                  an online member of
type Grants struct {
	backend    bool
	readAll    bool
	readUsers  map[string]struct{}
	readGroups map[string]struct{}
	joinAll    bool
	join       map[string]struct{}
	sendAll    bool
	sendUsers  map[string]struct{}
	sendGroups map[string]struct{}
}

// Unrestricted returns grants that allow everything, a backend's
// included: what a development gateway (--dev) gives every session.
func Unrestricted() *Grants {
	return &Grants{backend: true, readAll: true, joinAll: true, sendAll: true}
}

// ParseGrants checks a claim and returns its grants; nil gives the
// defaults (the zero Grants). An entry that is not of the documented forms
// is an error, so a typo never silently grants nothing (or everything).
func ParseGrants(c *GrantsClaim) (*Grants, error) {
	g := &Grants{}
	if c == nil {
		return g, nil
	}
	g.backend = c.Backend
	var err error
	if g.readAll, g.readUsers, g.readGroups, err = parseTargets("read", c.Read); err != nil {
		return nil, err
	}
	if g.sendAll, g.sendUsers, g.sendGroups, err = parseTargets("send", c.Send); err != nil {
		return nil, err
	}
	for _, e := range c.Join {
		if e == "*" {
			g.joinAll = true
			continue
		}
		if err := checkGrantName(e); err != nil {
			return nil, fmt.Errorf("%s.join entry %q: %w", ClaimName, truncate(e, 64), err)
		}
		if g.join == nil {
			g.join = make(map[string]struct{})
		}
		g.join[e] = struct{}{}
	}
	return g, nil
}

func parseTargets(field string, entries []string) (all bool, users, groups map[string]struct{}, err error) {
	for _, e := range entries {
		if e == "*" {
			all = true
			continue
		}
		kind, name, ok := strings.Cut(e, ":")
		if !ok || (kind != "user" && kind != "group") {
			return false, nil, nil, fmt.Errorf("%s.%s entry %q: want user:NAME, group:NAME or *", ClaimName, field, truncate(e, 64))
		}
		if err := checkGrantName(name); err != nil {
			return false, nil, nil, fmt.Errorf("%s.%s entry %q: %w", ClaimName, field, truncate(e, 64), err)
		}
		m := &users
		if kind == "group" {
			m = &groups
		}
		if *m == nil {
			*m = make(map[string]struct{})
		}
		(*m)[name] = struct{}{}
	}
	return all, users, groups, nil
}

func checkGrantName(s string) error {
	switch {
	case s == "":
		return fmt.Errorf("empty name")
	case len(s) > MaxGrantNameLen:
		return fmt.Errorf("name longer than %d bytes", MaxGrantNameLen)
	case !utf8.ValidString(s):
		return fmt.Errorf("name is not valid UTF-8")
	}
	return nil
}

// Backend reports whether the token is a backend's: it may read everything,
// and sees invisible users as they are.
func (g *Grants) Backend() bool { return g.backend }

// MayRead reports whether the token of user self may read user's presence
// and sessions (get, sub, locate, GET /v1/presence/{user}).
func (g *Grants) MayRead(self, user string) bool {
	if user == self || g.backend || g.readAll {
		return true
	}
	_, ok := g.readUsers[user]
	return ok
}

// MayReadAll reports whether the token may read every user and group
// (backend, or "*" in read): what a listing of many users' sessions needs.
func (g *Grants) MayReadAll() bool { return g.backend || g.readAll }

// MayReadGroup reports whether the token may read a group's view: its
// online members and their presence (group, sub of the group).
func (g *Grants) MayReadGroup(group string) bool {
	if g.backend || g.readAll {
		return true
	}
	_, ok := g.readGroups[group]
	return ok
}

// MayJoin reports whether the token may join group (hello's groups, join).
// Leaving is always allowed.
func (g *Grants) MayJoin(group string) bool {
	if g.joinAll {
		return true
	}
	_, ok := g.join[group]
	return ok
}

// MaySend reports whether the token may send to user, who is an online
// member of toGroups (the groups of the recipient's active sessions).
func (g *Grants) MaySend(user string, toGroups []string) bool {
	if g.sendAll {
		return true
	}
	if _, ok := g.sendUsers[user]; ok {
		return true
	}
	for _, gr := range toGroups {
		if _, ok := g.sendGroups[gr]; ok {
			return true
		}
	}
	return false
}

// Claim returns the grants as a claim (sorted entries): what
// `rollcall token` would mint for them.
func (g *Grants) Claim() *GrantsClaim {
	c := &GrantsClaim{Backend: g.backend}
	c.Read = targets(g.readAll, g.readUsers, g.readGroups)
	c.Send = targets(g.sendAll, g.sendUsers, g.sendGroups)
	if g.joinAll {
		c.Join = append(c.Join, "*")
	}
	for name := range g.join {
		c.Join = append(c.Join, name)
	}
	slices.Sort(c.Join)
	return c
}

func targets(all bool, users, groups map[string]struct{}) []string {
	var out []string
	if all {
		out = append(out, "*")
	}
	for u := range users {
		out = append(out, "user:"+u)
	}
	for gr := range groups {
		out = append(out, "group:"+gr)
	}
	slices.Sort(out)
	return out
}
