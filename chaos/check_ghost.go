package chaos

import (
	"fmt"
	"sort"
)

// No ghosts: a session that ended (bye, close, silence, a newer
// connection of the device, its gateway's death) is offline on every
// running gateway by its deadline (connModel.deadline: the end act plus
// the bound of its kind, pushed past any pause of the gateway that must
// send the ending write) and never shown online after it. An observing
// gateway is excused while it is itself down or recovering.

func (m *model) checkGhosts() []Violation {
	var out []Violation
	for _, c := range m.sortedConns() {
		if !c.welcomed || !m.users[c.user] || c.endAct >= m.stop {
			continue
		}
		for _, o := range m.gws {
			if v := m.ghostOn(c, o); v != nil {
				out = append(out, *v)
			}
		}
	}
	return out
}

// ghostOn returns the first observation on gateway o showing session c
// online after its deadline, if any.
func (m *model) ghostOn(c *connModel, o string) *Violation {
	d, dwhy := m.deadlineOn(c, o)
	excl := m.gw[o].down
	var first *obsModel
	firstAt := inf
	consider := func(ob *obsModel, at float64) {
		if at < firstAt && findSession(ob.byUser[c.user], c.dev, c.epoch, c.gw) != nil {
			first, firstAt = ob, at
		}
	}
	gets := m.gets[o]
	for i := sort.Search(len(gets), func(i int) bool { return gets[i].sent >= d }); i < len(gets); i++ {
		g := gets[i]
		if g.t > m.stop || anyOverlap(excl, g.sent, g.t) {
			continue
		}
		if findSession(g.byUser[c.user], c.dev, c.epoch, c.gw) != nil {
			consider(g, g.sent)
			break
		}
	}
	for _, s := range m.streams[o] {
		for _, ev := range s.events {
			if lo := m.genLow(ev); lo >= d && ev.t <= m.stop && !anyOverlap(excl, lo, ev.t) {
				consider(ev, ev.t)
			}
		}
		// The stream's state at the deadline (or when o recovered, and the
		// harness read again).
		pt := d
		if w := m.downAt(o, pt); w != nil {
			pt = w.b
		}
		pt = m.afterStalls(pt)
		if pt < s.end && pt >= s.start && pt <= m.stop {
			if ev := s.stateAt(c.user, pt); ev != nil && ev.t < pt {
				if findSession(ev.byUser[c.user], c.dev, c.epoch, c.gw) != nil && pt < firstAt {
					first, firstAt = ev, pt
				}
			}
		}
	}
	if first == nil {
		return nil
	}
	how := fmt.Sprintf("%s at %s", first.src, fmtT(firstAt))
	if first.t < firstAt && first.src == "event" {
		how = fmt.Sprintf("its latest event (%s) still, as of %s", fmtT(first.t), fmtT(firstAt))
	}
	return &Violation{Kind: Ghost, At: firstAt, User: c.user,
		Msg: fmt.Sprintf("%s shows %s online (%s), %.0fms past its deadline %s (ended %s: %s; deadline: %s)",
			o, c.name(), how, firstAt-d, fmtT(d), fmtT(c.endAct), c.endWhy, dwhy),
		Lines: uniq(append([]int{first.line, c.endWhyLine, c.helloLine}, m.contextLines(firstAt, o, c.gw)...)...)}
}

// checkUnknown reports sessions shown online that no client of the
// workload was welcomed for. A hello that failed (its gateway died before
// answering) may have left one; it must be gone by the crash bound after
// the failure.
func (m *model) checkUnknown() []Violation {
	type key struct {
		user, dev, gw string
		epoch         uint64
	}
	known := map[key]bool{}
	for _, c := range m.conns {
		if c.welcomed {
			known[key{c.user, c.dev, c.gw, c.epoch}] = true
		}
	}
	seen := map[key]bool{}
	var out []Violation
	for _, ob := range m.obs {
		if inAny(m.gw[ob.gw].down, ob.t) {
			continue
		}
		for u, p := range ob.byUser {
			if !m.users[u] {
				continue
			}
			for _, s := range p.Sessions {
				k := key{u, s.Device, s.Gateway, s.Epoch}
				if known[k] || seen[k] {
					continue
				}
				// A failed hello of this device on that gateway, before.
				deadline, line := -1.0, 0
				for _, c := range m.byKey[[2]string{u, s.Device}] {
					if c.welcomed || c.gw != s.Gateway || c.helloSent > ob.t {
						continue
					}
					failed := c.helloT
					if c.endLine != 0 {
						failed = max(failed, c.endT)
					}
					dl := m.extendForPauses(c.gw, failed, failed+m.b.crash)
					if dl > deadline {
						deadline, line = dl, c.helloLine
					}
				}
				if deadline >= 0 && ob.sent < deadline {
					continue
				}
				seen[k] = true
				msg := fmt.Sprintf("%s shows %s/%s epoch %d on %s online (%s at %s), a session no client was welcomed for",
					ob.gw, u, s.Device, s.Epoch, s.Gateway, ob.src, fmtT(ob.t))
				if deadline >= 0 {
					msg = fmt.Sprintf("%s shows %s/%s epoch %d on %s online (%s at %s), %.0fms past the deadline %s of the failed hello that may have made it",
						ob.gw, u, s.Device, s.Epoch, s.Gateway, ob.src, fmtT(ob.t), ob.sent-deadline, fmtT(deadline))
				}
				out = append(out, Violation{Kind: Ghost, At: ob.t, User: u, Msg: msg, Lines: uniq(ob.line, line)})
			}
		}
	}
	return out
}
