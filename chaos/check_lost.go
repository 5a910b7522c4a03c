package chaos

import (
	"fmt"
	"slices"
	"sort"
)

// Nothing lost: a client that stays connected and heartbeating is shown
// online, with its latest status, on every running gateway from its
// welcome + propagation on, and is never shown offline while both its
// gateway and the observing one are running. The windows in which either
// gateway is paused, dead or recovering (Bounds.Recovery after a resume
// or a restart) are left out: a paused gateway cannot answer, and its
// peers rightly show its sessions expired by lease once the pause is
// longer than the lease rides out. A pause of the session's gateway no
// longer than Bounds.PauseTolerance is left out only where that gateway
// is the observer: every other gateway must show its sessions online
// throughout.
//
// A session stops counting as heartbeating at its first end act (bye,
// close, silence, a newer connection of the device, its gateway's death)
// or at the first gap between its requests of timeout - grace, whichever
// is first.

func (m *model) checkLost() []Violation {
	var out []Violation
	for _, c := range m.sortedConns() {
		if !c.welcomed || c.role != "actor" || !m.users[c.user] {
			continue
		}
		a, b := c.helloT+m.b.prop, min(c.healthyEnd, m.stop)
		if a >= b {
			continue
		}
		for _, o := range m.gws {
			out = append(out, m.lostOn(c, o, a, b)...)
		}
	}
	return out
}

// lostOn checks session c as gateway o shows it over [a, b).
func (m *model) lostOn(c *connModel, o string, a, b float64) []Violation {
	// The session's own gateway may have been paused briefly: its lease
	// rides that out, and the others show its sessions throughout.
	own := m.gw[c.gw].down
	if o != c.gw {
		own = m.gw[c.gw].peerDown
	}
	excl := slices.Concat(m.gw[o].down, own, m.cutWindows(o, c.gw))
	var out []Violation
	missing, stale := false, false
	check := func(ob *obsModel, lo, hi float64, asOf float64) {
		p := ob.byUser[c.user]
		if p == nil {
			return
		}
		how := fmt.Sprintf("%s at %s", ob.src, fmtT(lo))
		if asOf > 0 {
			how = fmt.Sprintf("latest event (%s) still, as of %s", fmtT(ob.t), fmtT(asOf))
		}
		last := c.lastReqBefore(hi)
		e := findSession(p, c.dev, c.epoch, c.gw)
		switch {
		case e == nil && !missing:
			missing = true
			at := max(lo, asOf)
			v := Violation{Kind: Lost, At: at, User: c.user,
				Msg: fmt.Sprintf("%s shows %s offline (%s) while its client is connected and heartbeating (welcomed %s, last request %s)",
					o, c.name(), how, fmtT(c.helloT), fmtT(last.t)),
				Lines: uniq(append([]int{ob.line, c.helloLine, last.line}, m.contextLines(at, o, c.gw)...)...)}
			if r, ok := m.justJoined(o, at); ok {
				v.Kind = Joined
				v.Msg = fmt.Sprintf("%s, %s after it was ready (at %s)", v.Msg, fmtT(at-r.at), fmtT(r.at))
				v.Lines = uniq(append(v.Lines, r.line)...)
			}
			out = append(out, v)
		case e != nil && !stale:
			allowed := m.allowedStatuses(c, lo, hi)
			if !slices.Contains(allowed, e.Status) {
				stale = true
				st := c.statuses[len(c.statuses)-1]
				for _, s := range c.statuses {
					if s.sent <= hi {
						st = s
					}
				}
				out = append(out, Violation{Kind: Lost, At: max(lo, asOf), User: c.user,
					Msg: fmt.Sprintf("%s shows %s with status %s (%s); its client set %s at %s (answered %s)",
						o, c.name(), e.Status, how, st.status, fmtT(st.sent), fmtT(st.recv)),
					Lines: uniq(append([]int{ob.line, st.line, c.helloLine}, m.contextLines(max(lo, asOf), o, c.gw)...)...)})
			}
		}
	}
	gets := m.gets[o]
	for i := sort.Search(len(gets), func(i int) bool { return gets[i].sent >= a }); i < len(gets) && gets[i].sent < b; i++ {
		g := gets[i]
		if g.t > b || anyOverlap(excl, g.sent, g.t) {
			continue
		}
		check(g, g.sent, g.t, 0)
	}
	for _, s := range m.streams[o] {
		for _, ev := range s.events {
			if lo := m.genLow(ev); lo >= a && ev.t < b && !anyOverlap(excl, lo, ev.t) {
				check(ev, lo, ev.t, 0)
			}
		}
		// A stream that never sent the event: its state at the start of
		// each window the session must be shown in.
		points := []float64{a}
		for _, w := range excl {
			if w.b > a && w.b < b {
				points = append(points, w.b)
			}
		}
		for _, pt := range points {
			pt = m.afterStalls(max(pt, s.start+m.b.prop))
			if pt >= b || pt >= s.end || inAny(excl, pt) {
				continue
			}
			if ev := s.stateAt(c.user, pt); ev != nil && ev.t < pt {
				check(ev, pt, pt, pt)
			}
		}
	}
	return out
}

// checkConnEnds checks why each connection ended: a gateway may close a
// connection only for a reason (the client's own bye or close, a newer
// connection of the device, its own death or shutdown, a real silence of
// the timeout), and may refuse a request only for one.
func (m *model) checkConnEnds() []Violation {
	var out []Violation
	for _, c := range m.sortedConns() {
		for _, e := range c.errs {
			if e.t > m.stop {
				continue
			}
			switch e.err {
			case "eof", "timeout", "context canceled", "shutting_down":
				continue
			}
			out = append(out, Violation{Kind: Lost, At: e.t, User: c.user,
				Msg:   fmt.Sprintf("%s refused %s's %s: %s", c.gw, c.user+"/"+c.dev, e.op, e.err),
				Lines: uniq(e.line, c.helloLine)})
		}
		if !c.welcomed || c.endLine == 0 || c.endT > m.stop {
			continue
		}
		clientEnded := c.closeAt <= c.endT || c.byeSent <= c.endT
		why := ""
		switch c.endReason {
		case "expired":
			gap, from := m.largestGap(c)
			if gap < m.b.timeout-m.b.grace {
				why = fmt.Sprintf("expired it although its client's requests were never more than %.0fms apart (largest gap from %s); the timeout is %.0fms",
					gap, fmtT(from.t), m.b.timeout)
				last := c.lastReqBefore(c.endT)
				out = append(out, Violation{Kind: Lost, At: c.endT, User: c.user,
					Msg:   fmt.Sprintf("%s %s", c.gw, why) + fmt.Sprintf(" [%s]", c.name()),
					Lines: uniq(append([]int{c.endLine, last.line, c.helloLine}, m.contextLines(c.endT, c.gw)...)...)})
			}
			continue
		case "superseded":
			newer := false
			for _, o := range m.byKey[[2]string{c.user, c.dev}] {
				if o != c && o.helloSent > c.helloSent && o.helloSent <= c.endT {
					newer = true
				}
			}
			if !newer {
				why = "superseded it though the device opened no newer connection"
			}
		case "shutting_down":
			// The drain may start a moment after the SIGTERM, so a hello
			// welcomed just after it is still told shutting_down.
			if !m.draining(c.gw, c.endT) {
				why = "said shutting_down though nobody stopped it"
			}
		case "eof":
			if clientEnded || c.silentAt <= c.endT {
				continue
			}
			if d := m.deathDuring(c.gw, c.helloSent-1, c.endT); d != nil && c.endT-d.at <= 3000 {
				continue
			}
			why = "closed it without a reason"
		case "slow_consumer":
			why = "cut it as a slow consumer though it read promptly"
		default:
			why = "closed it with " + c.endReason
		}
		if why != "" && !clientEnded {
			out = append(out, Violation{Kind: Lost, At: c.endT, User: c.user,
				Msg:   fmt.Sprintf("%s %s [%s]", c.gw, why, c.name()),
				Lines: uniq(append([]int{c.endLine, c.helloLine}, m.contextLines(c.endT, c.gw)...)...)})
		}
	}
	return out
}

// draining reports whether gateway gw had been sent SIGTERM and had not
// exited (or only just) at t.
func (m *model) draining(gw string, t float64) bool {
	for _, d := range m.gw[gw].deaths {
		if d.kind == "term" && d.at <= t && (d.exit == inf || t <= d.exit+1000) {
			return true
		}
	}
	return false
}

// largestGap returns the longest time c went without a request before its
// end (from the welcome), and the request it started at.
func (m *model) largestGap(c *connModel) (float64, req) {
	last := req{t: c.helloT, line: c.helloLine}
	best, from := 0.0, last
	for _, r := range c.reqs {
		if r.t > c.endT {
			break
		}
		if r.t-last.t > best {
			best, from = r.t-last.t, last
		}
		last = r
	}
	if c.endT-last.t > best {
		best, from = c.endT-last.t, last
	}
	return best, from
}

// sortedConns returns the connections by id, for reports in a stable order.
func (m *model) sortedConns() []*connModel {
	out := make([]*connModel, 0, len(m.conns))
	for _, c := range m.conns {
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b *connModel) int { return a.id - b.id })
	return out
}

// contextLines returns, for each gateway named, the lines of its last
// gateway events (signals, exits, readies) at or before t, up to three
// each: what the reader of a violation wants beside it.
func (m *model) contextLines(t float64, gws ...string) []int {
	var out []int
	for _, g := range uniqS(gws) {
		var mine []int
		for _, l := range m.gwLines {
			r := m.recordAt(l)
			if r != nil && r.GW == g && r.T <= t {
				mine = append(mine, l)
			}
		}
		if len(mine) > 3 {
			mine = mine[len(mine)-3:]
		}
		out = append(out, mine...)
	}
	return out
}

func uniqS(ss []string) []string {
	var out []string
	for _, s := range ss {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}
