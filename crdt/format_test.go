package crdt

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Text forms of records, replicas and presence for scenario outputs and
// failure messages.

func formatDelta(d *Delta) string {
	if d.Session != nil {
		return d.Session.Origin.String() + " v" + strconv.FormatUint(d.Session.Version, 10) + " " + formatSession(d.Session)
	}
	if ls := d.LastSeen; ls != nil {
		return fmt.Sprintf("%s v%d last seen %s at=%d", ls.Origin, ls.Version, ls.User, ls.At)
	}
	a := d.Account
	return fmt.Sprintf("%s v%d account %s override=%s auth=%s", a.Origin, a.Version, a.User, a.Override, orDash(a.AuthoritativeDevice))
}

func formatSession(x *Session) string {
	s := fmt.Sprintf("%s epoch=%d seq=%d %s %s", x.Key(), x.Epoch, x.Seq, x.State, x.Status)
	if len(x.Groups) > 0 {
		s += " groups=" + strings.Join(x.Groups, ",")
	}
	return s
}

func dumpReplica(r *Replica) string {
	ss, as := r.Snapshot()
	var b strings.Builder
	for i := range ss {
		x := &ss[i]
		fmt.Fprintf(&b, "%s origin=%s v%d", formatSession(x), x.Origin, x.Version)
		if v, _ := r.Session(x.Key()); v.State != x.State {
			fmt.Fprintf(&b, " (shown %s)", v.State)
		}
		b.WriteString("\n")
	}
	for _, a := range as {
		fmt.Fprintf(&b, "account %s override=%s auth=%s writer=%s origin=%s v%d\n",
			a.User, a.Override, orDash(a.AuthoritativeDevice), a.Writer, a.Origin, a.Version)
	}
	for _, ls := range r.LastSeenSnapshot() {
		fmt.Fprintf(&b, "last seen %s at=%d origin=%s v%d\n", ls.User, ls.At, ls.Origin, ls.Version)
	}
	if b.Len() == 0 {
		return "empty"
	}
	return b.String()
}

func formatPresence(p Presence) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s", p.User, p.Status)
	for _, c := range p.Sessions {
		fmt.Fprintf(&b, "\n  %s id=%s epoch=%d gw=%s %s", c.Device, c.Session, c.Epoch, c.Gateway, c.Status)
	}
	return b.String()
}

func listOrNone(xs []string) string {
	if len(xs) == 0 {
		return "none"
	}
	return strings.Join(slices.Clone(xs), " ")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
