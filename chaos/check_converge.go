package chaos

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/rollcall/rollcall/protocol"
)

// Convergence: from the end of the last fault + the convergence bound
// on, every two running gateways answer get alike for every user whose
// state is not changing: same online, status, and sessions (session,
// device, epoch, gateway, status). Two polls are compared when they were
// sent within maxPollSkew of each other, for the users with no change
// window overlapping both: a change window of a user is from a request
// that changes it (hello, status, bye) being sent until its answer +
// propagation, and from a session's end act to its deadline.

// maxPollSkew is how far apart two gateways' polls may be sent to be
// compared.
const maxPollSkew = 400.0

// maxPerPair bounds the convergence violations reported per gateway
// pair; the rest are counted in one more.
const maxPerPair = 10

func (m *model) checkConvergence() []Violation {
	from := max(m.lastFault, m.run.FaultStart) + m.b.conv
	changes := m.changeWindows()
	live := func(gw string) []*obsModel {
		var out []*obsModel
		for _, g := range m.gets[gw] {
			if g.sent >= from && g.t <= m.stop && !anyOverlap(m.gw[gw].down, g.sent, g.t) {
				out = append(out, g)
			}
		}
		return out
	}
	users := make([]string, 0, len(m.users))
	for u := range m.users {
		users = append(users, u)
	}
	slices.Sort(users)
	var out []Violation
	for i, o1 := range m.gws {
		g1 := live(o1)
		for _, o2 := range m.gws[i+1:] {
			g2 := live(o2)
			if len(g1) == 0 || len(g2) == 0 {
				continue
			}
			type div struct {
				a, b       *obsModel
				count      int
				first, end float64
			}
			divs := map[string]*div{}
			for _, a := range g1 {
				j := sort.Search(len(g2), func(j int) bool { return g2[j].sent >= a.sent })
				var b *obsModel
				for _, k := range []int{j - 1, j} {
					if k >= 0 && k < len(g2) && (b == nil || abs(g2[k].sent-a.sent) < abs(b.sent-a.sent)) {
						b = g2[k]
					}
				}
				if b == nil || abs(b.sent-a.sent) > maxPollSkew {
					continue
				}
				lo, hi := min(a.sent, b.sent), max(a.t, b.t)
				for _, u := range users {
					if anyOverlap(changes[u], lo, hi) {
						continue
					}
					pa, pb := projection(a.byUser[u]), projection(b.byUser[u])
					if pa == pb {
						continue
					}
					d := divs[u]
					if d == nil {
						d = &div{a: a, b: b, first: lo}
						divs[u] = d
					}
					d.count++
					d.end = hi
				}
			}
			var diverged []string
			for u := range divs {
				diverged = append(diverged, u)
			}
			slices.SortFunc(diverged, func(x, y string) int { return cmpF(divs[x].first, divs[y].first) })
			for k, u := range diverged {
				d := divs[u]
				if k == maxPerPair {
					out = append(out, Violation{Kind: Convergence, At: d.first,
						Msg: fmt.Sprintf("%s and %s also disagree about %d more users: %s", o1, o2, len(diverged)-k, strings.Join(diverged[k:], " "))})
					break
				}
				out = append(out, Violation{Kind: Convergence, At: d.first, User: u,
					Msg: fmt.Sprintf("%s and %s disagree about %s, %.0fms after the last fault ended at %s (bound %.0fms), in %d poll pairs until %s: %s says %s; %s says %s",
						o1, o2, u, d.first-(from-m.b.conv), fmtT(from-m.b.conv), m.b.conv, d.count, fmtT(d.end),
						o1, projection(d.a.byUser[u]), o2, projection(d.b.byUser[u])),
					Lines: uniq(d.a.line, d.b.line)})
			}
		}
	}
	return out
}

// changeWindows returns, per workload user, the windows in which its
// state may be changing.
func (m *model) changeWindows() map[string][]window {
	out := map[string][]window{}
	for _, c := range m.conns {
		if !m.users[c.user] {
			continue
		}
		w := out[c.user]
		if c.welcomed {
			w = append(w, window{a: c.helloSent, b: m.extendForPauses(c.gw, c.helloT, c.helloT+m.b.prop)})
			for _, s := range c.statuses[1:] {
				b := c.deadline
				if s.recv < inf {
					b = m.extendForPauses(c.gw, s.recv, s.recv+m.b.prop)
				}
				w = append(w, window{a: s.sent, b: b})
			}
			if c.endAct < inf {
				last := c.deadline
				for _, o := range m.gws {
					d, _ := m.deadlineOn(c, o)
					last = max(last, d)
				}
				w = append(w, window{a: c.endAct, b: last})
			}
		} else {
			failed := c.helloT
			if c.endLine != 0 {
				failed = max(failed, c.endT)
			}
			w = append(w, window{a: c.helloSent, b: m.extendForPauses(c.gw, failed, failed+m.b.crash)})
		}
		out[c.user] = w
	}
	return out
}

// projection is a presence as the convergence check compares it.
func projection(p *protocol.Presence) string {
	if p == nil {
		return "(absent)"
	}
	ss := make([]string, len(p.Sessions))
	for i, s := range p.Sessions {
		ss[i] = fmt.Sprintf("%s/%s/%d@%s/%s", s.Session, s.Device, s.Epoch, s.Gateway, s.Status)
	}
	slices.Sort(ss)
	on := "offline"
	if p.Online {
		on = "online"
	}
	return fmt.Sprintf("%s %s [%s]", on, p.Status, strings.Join(ss, " "))
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}
