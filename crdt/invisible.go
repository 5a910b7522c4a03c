package crdt

import "slices"

// Invisible reports whether user's account shows the user invisible at
// now (Unix nanoseconds): its override is OverrideInvisible and has not
// lapsed.
func (r *Replica) Invisible(user string, now int64) bool {
	if _, ok := r.invisible[user]; !ok {
		return false
	}
	return !r.account(user).Lapsed(now)
}

// InvisibleAccounts returns how many account records hold the invisible
// override, lapsed or not: while it is 0, no reader needs the rule.
func (r *Replica) InvisibleAccounts() int { return len(r.invisible) }

// GroupInvisibleUsers returns the users GroupOnlineUsers lists for group g
// whose account is invisible at now, sorted: the members a reader other
// than themselves does not see (Presence.Public). It costs
// O(min(invisible accounts, the group's online users)), so a group count
// stays cheap while few users are invisible.
func (r *Replica) GroupInvisibleUsers(g string, now int64) []string {
	if len(r.invisible) == 0 {
		return nil
	}
	id := r.names.lookup(g)
	if id == 0 {
		return nil
	}
	members := r.groupIndex()[id]
	var out []string
	if len(r.invisible) <= len(members) {
		for u := range r.invisible {
			if uid := r.names.lookup(u); uid != 0 && members[uid] > 0 && r.Invisible(u, now) {
				out = append(out, u)
			}
		}
	} else {
		for uid := range members {
			if u := r.names.str(uid); r.Invisible(u, now) {
				out = append(out, u)
			}
		}
	}
	slices.Sort(out)
	return out
}
