package chaos

// The checker's time windows: when each gateway was paused, dead or
// recovering, when network rules cut two gateways apart, when the harness
// itself was starved; and what they do to a deadline.

// window is a closed interval of history time, with the line that
// opened it.
type window struct {
	a, b float64
	line int
	why  string
}

func (w window) contains(t float64) bool    { return w.a <= t && t <= w.b }
func (w window) overlaps(a, b float64) bool { return w.a <= b && a <= w.b }
func inAny(ws []window, t float64) bool     { return anyOverlap(ws, t, t) }
func anyOverlap(ws []window, a, b float64) bool {
	for _, w := range ws {
		if w.overlaps(a, b) {
			return true
		}
	}
	return false
}

// downEvent is a kill, crash or SIGTERM of a gateway.
type downEvent struct {
	at    float64 // the signal, or the unexpected exit
	ready float64 // the next ready (inf if none)
	exit  float64 // when the process exited (inf if unknown)
	kind  string  // kill, crash, term
	line  int

	exitStatus string // the exit record's status
	exitLine   int
}

// netCut is one network rule: gateway x drops (all, or some with lossy)
// what it receives from y, and with out what it sends to y, over [a, b].
type netCut struct {
	x, y  string
	out   bool
	lossy bool
	a, b  float64
	line  int
}

// deafens reports whether the cut stops o hearing g: o drops what g
// sends, or g drops (with out) what it sends to o.
func (c netCut) deafens(o, g string) bool {
	return (c.x == o && c.y == g) || (c.out && c.x == g && c.y == o)
}

// gwModel is what the history says about one gateway.
type gwModel struct {
	down   []window // not expected to answer or be answered: paused, dead, or recovering
	pauses []window // SIGSTOP..SIGCONT
	// peerDown is down less its short pauses (Bounds.PauseTolerance): the
	// windows in which the others may show its sessions offline
	peerDown []window
	deaths   []downEvent  // kills, crashes, terms
	ready    []readyEvent // every ready, the first start's included
}

// readyEvent is a gateway's ready: it joined the cluster (first start or
// restart) and caught up with a member.
type readyEvent struct {
	at   float64
	line int
}

// cutWindows returns the windows in which gateways o and g may not see
// each other: a network rule between them, either way, until its heal +
// rejoin.
func (m *model) cutWindows(o, g string) []window {
	var out []window
	for _, c := range m.cuts {
		if (c.x == o && c.y == g) || (c.x == g && c.y == o) {
			out = append(out, window{a: c.a, b: c.b + m.b.rejoin, line: c.line, why: "network fault"})
		}
	}
	return out
}

// deafDeadline moves a ghost deadline d, set by a write of gateway g for
// a session that ended at end, as gateway o sees it, past network faults
// that kept o from hearing g meanwhile: o shows the session until the
// fault heals and any loss is repaired, or, with lease (g owns the
// session) and a full cut, until o's lease on g runs out if sooner.
func (m *model) deafDeadline(o, g string, end, d float64, lease bool) float64 {
	for _, c := range m.cuts {
		if !c.deafens(o, g) || c.b < end || c.a > d {
			continue
		}
		if c.lossy || !lease {
			d = max(d, c.b+m.b.recovery)
		} else {
			d = max(d, min(c.a+m.b.crash, c.b+m.b.recovery))
		}
	}
	return d
}

// stallDrain is how long after a stall of the harness it may still be
// reading what queued up during it.
const stallDrain = 100.0

// genLow returns the earliest time an event may have been sent: its
// receipt, unless the harness was stalled just before, when it may have
// waited in the socket since the stall began.
func (m *model) genLow(ev *obsModel) float64 {
	lo := ev.t
	for _, s := range m.stalls {
		if s.contains(ev.t) {
			lo = min(lo, s.a)
		}
	}
	return lo
}

// afterStalls moves a point in time past any stall of the harness around
// it: what a stream showed then is only known once the harness read again.
func (m *model) afterStalls(t float64) float64 {
	for moved := true; moved; {
		moved = false
		for _, s := range m.stalls {
			if s.contains(t) && t < s.b {
				t, moved = s.b, true
			}
		}
	}
	return t
}

// buildGateways turns the gw records (in time order) into each gateway's
// pauses, deaths and down windows.
func (m *model) buildGateways(idx []int) {
	type open struct {
		at   float64
		line int
		why  string
	}
	stopAt := map[string]*open{}
	downAt := map[string]*open{}
	for _, i := range idx {
		r, line := m.h.Records[i], m.h.Lines[i]
		g := m.gw[r.GW]
		if g == nil {
			continue
		}
		m.gwLines = append(m.gwLines, line)
		switch r.Ev {
		case "signal":
			switch r.Sig {
			case "STOP":
				stopAt[r.GW] = &open{at: r.T, line: line}
			case "CONT":
				if o := stopAt[r.GW]; o != nil {
					g.pauses = append(g.pauses, window{a: o.at, b: r.T, line: o.line, why: "paused"})
					w := window{a: o.at, b: r.T + m.b.recovery, line: o.line, why: "paused"}
					g.down = append(g.down, w)
					if r.T-o.at > m.b.pause {
						g.peerDown = append(g.peerDown, w)
					}
					delete(stopAt, r.GW)
				}
			case "KILL", "TERM":
				kind := "kill"
				if r.Sig == "TERM" {
					kind = "term"
				}
				if o := downAt[r.GW]; o == nil {
					downAt[r.GW] = &open{at: r.T, line: line, why: kind}
					g.deaths = append(g.deaths, downEvent{at: r.T, ready: inf, exit: inf, kind: kind, line: line})
				}
			}
		case "exit":
			if n := len(g.deaths); n > 0 && g.deaths[n-1].exit == inf && downAt[r.GW] != nil {
				d := &g.deaths[n-1]
				d.exit, d.exitStatus, d.exitLine = r.T, r.Exit, line
			}
			if !r.Expected && downAt[r.GW] == nil {
				downAt[r.GW] = &open{at: r.T, line: line, why: "crash"}
				g.deaths = append(g.deaths, downEvent{at: r.T, ready: inf, exit: r.T, kind: "crash", line: line,
					exitStatus: r.Exit, exitLine: line})
			}
		case "restart-failed":
			m.restartFailed = append(m.restartFailed, line)
		case "ready":
			g.ready = append(g.ready, readyEvent{at: r.T, line: line})
			if o := downAt[r.GW]; o != nil {
				w := window{a: o.at, b: r.T + m.b.recovery, line: o.line, why: o.why}
				g.down, g.peerDown = append(g.down, w), append(g.peerDown, w)
				g.deaths[len(g.deaths)-1].ready = r.T
				delete(downAt, r.GW)
				m.lastFault = max(m.lastFault, r.T)
			}
		}
	}
	for name, o := range downAt {
		w := window{a: o.at, b: inf, line: o.line, why: o.why}
		m.gw[name].down, m.gw[name].peerDown = append(m.gw[name].down, w), append(m.gw[name].peerDown, w)
	}
	for name, o := range stopAt {
		w := window{a: o.at, b: inf, line: o.line, why: "paused"}
		m.gw[name].pauses = append(m.gw[name].pauses, window{a: o.at, b: inf, line: o.line, why: "paused"})
		m.gw[name].down, m.gw[name].peerDown = append(m.gw[name].down, w), append(m.gw[name].peerDown, w)
	}
}

// extendForPauses pushes a deadline d, counted from start, past the pauses
// of gateway gw: the gateway cannot send the write that ends a session
// while it is stopped, and a stall is not the client's silence, so the
// deadline moves by the stall and ends no sooner than the recovery after
// the resume.
func (m *model) extendForPauses(gw string, start, d float64) float64 {
	g := m.gw[gw]
	if g == nil {
		return d
	}
	for _, p := range g.pauses {
		if p.b < start || p.a > d {
			continue
		}
		d += min(p.b, d) - max(p.a, start)
		d = max(d, p.b+m.b.recovery)
	}
	return d
}

// deathDuring returns the first kill, crash or term of gw in [from, to].
func (m *model) deathDuring(gw string, from, to float64) *downEvent {
	g := m.gw[gw]
	if g == nil {
		return nil
	}
	for i := range g.deaths {
		if d := &g.deaths[i]; d.at >= from && d.at <= to {
			return d
		}
	}
	return nil
}

// justJoined returns the last ready of gateway gw at or before t if it is
// within the just-joined bound of t.
func (m *model) justJoined(gw string, t float64) (readyEvent, bool) {
	g := m.gw[gw]
	if g == nil {
		return readyEvent{}, false
	}
	for i := len(g.ready) - 1; i >= 0; i-- {
		if r := g.ready[i]; r.at <= t {
			return r, t-r.at <= m.b.joined
		}
	}
	return readyEvent{}, false
}

// downAt returns the down window of gateway gw containing t, if any.
func (m *model) downAt(gw string, t float64) *window {
	g := m.gw[gw]
	if g == nil {
		return nil
	}
	for i := range g.down {
		if g.down[i].contains(t) {
			return &g.down[i]
		}
	}
	return nil
}
