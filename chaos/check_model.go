package chaos

import (
	"math"
	"slices"
	"sort"
	"strings"
)

// The checker's model of a history: gateways' down windows, connections
// with their sessions' lifetimes and deadlines, observations indexed by
// gateway and stream. Everything is in history milliseconds.

var inf = math.Inf(1)

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
	down   []window    // not expected to answer or be answered: paused, dead, or recovering
	pauses []window    // SIGSTOP..SIGCONT
	deaths []downEvent // kills, crashes, terms
}

// statusOp is a status a session was given (hello, then status ops).
type statusOp struct {
	sent, recv float64 // recv is inf if never answered
	status     string
	line       int
}

// connModel is one client connection.
type connModel struct {
	id                    int
	role, user, dev, gw   string
	life                  int
	helloSent, helloT     float64
	helloErr              string
	helloLine             int
	welcomed              bool
	epoch                 uint64
	session               string
	reqs                  []req // the requests, by when they were sent (the welcome first)
	statuses              []statusOp
	opLines               []int // the connection's op lines, in order
	errs                  []opErr
	silentAt, closeAt     float64
	silentLine, closeLine int
	byeSent, byeT         float64
	byeLine               int
	byeOK                 bool
	endReason             string
	endT                  float64
	endLine               int
	endAct                float64
	endWhy                string
	endWhyLine            int
	deadline              float64 // ghost deadline: offline everywhere by then
	deadlineWhy           string
	causes                []endCause // every deadline that applies; deadline is the earliest
	healthyEnd            float64    // heartbeating until then
	prev                  int
}

// endCause is one reason a session must be offline by a time: t, and
// the gateway whose write (or silence) makes it so.
type endCause struct {
	t      float64
	why    string
	writer string // the gateway that writes the end; "" for a death (leases)
}

// opErr is a request that failed.
type opErr struct {
	op, err string
	t       float64
	line    int
}

// req is one request of a connection: when it was sent, and its line.
type req struct {
	t    float64
	line int
}

// lastReqBefore returns the last request sent at or before t.
func (c *connModel) lastReqBefore(t float64) req {
	last := req{t: c.helloT, line: c.helloLine}
	for _, r := range c.reqs {
		if r.t > t {
			break
		}
		last = r
	}
	return last
}

// obsModel is one observation: a get answer or an event.
type obsModel struct {
	gw     string
	life   int
	src    string
	c      int
	sent   float64 // gets: when asked; events: = t
	t      float64
	line   int
	byUser map[string]*Presence
}

// streamModel is one subscriber connection's events.
type streamModel struct {
	id     int
	gw     string
	life   int
	start  float64 // when the sub was answered
	end    float64 // when the connection ended (inf if it outlived the run)
	events []*obsModel
}

// stateAt returns the last event for user received at or before t.
func (s *streamModel) stateAt(user string, t float64) *obsModel {
	var last *obsModel
	for _, ev := range s.events {
		if ev.t > t {
			break
		}
		if ev.byUser[user] != nil {
			last = ev
		}
	}
	return last
}

// model is a history, read for checking.
type model struct {
	h          *History
	run        *RunInfo
	runLine    int
	stop       float64
	b          boundsMS
	users      map[string]bool
	gws        []string
	gw         map[string]*gwModel
	conns      map[int]*connModel
	byKey      map[[2]string][]*connModel // (user, device) -> connections, by hello sent
	gets       map[string][]*obsModel     // gateway -> gets by sent
	streams    map[string][]*streamModel  // gateway -> subscriber streams
	obs        []*obsModel
	lastFault  float64 // when the last fault ended (or the last gateway came back)
	faults     int
	ops        int
	gwLines    []int // gw records (signals, exits, readies), for reports
	faultLines []int

	stalls        []window    // when the harness itself did not run (+ stallDrain)
	cuts          []netCut    // network faults
	restartFailed []int       // lines of failed restarts
	byLine        map[int]int // line -> index in h.Records
}

// boundsMS are the bounds in history milliseconds.
type boundsMS struct {
	prop, silent, crash, recovery, conv, grace, timeout, drain, rejoin, slack float64
}

func newBoundsMS(ri *RunInfo) boundsMS {
	b := ri.Bounds()
	return boundsMS{prop: ms(b.Propagation), silent: ms(b.SilentExpiry), crash: ms(b.CrashExpiry),
		recovery: ms(b.Recovery), conv: ms(b.Convergence), rejoin: ms(b.Rejoin), slack: ms(b.Slack), grace: ms(b.Grace), timeout: ms(b.Timeout), drain: ri.DrainMS}
}

// buildModel reads a history into a model. It returns nil if the history
// has no header.
func buildModel(h *History) *model {
	m := &model{h: h, stop: inf, users: map[string]bool{}, gw: map[string]*gwModel{}, conns: map[int]*connModel{},
		byKey: map[[2]string][]*connModel{}, byLine: map[int]int{}, gets: map[string][]*obsModel{}, streams: map[string][]*streamModel{}}
	for i, r := range h.Records {
		m.byLine[h.Lines[i]] = i
		switch r.K {
		case KindRun:
			if m.run == nil && r.Run != nil {
				m.run, m.runLine = r.Run, h.Lines[i]
			}
		case KindStop:
			m.stop = min(m.stop, r.T)
		case KindOp:
			if r.Op == "hello" {
				m.addHello(r, h.Lines[i])
			}
		}
	}
	if m.run == nil {
		return nil
	}
	m.b = newBoundsMS(m.run)
	for _, u := range m.run.Users {
		m.users[u] = true
	}
	m.gws = m.run.Gateways
	for _, g := range m.gws {
		m.gw[g] = &gwModel{}
	}
	// Records sorted by time for the gateway timelines.
	order := make([]int, len(h.Records))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return h.Records[order[a]].T < h.Records[order[b]].T })
	var gwRecs []int
	for _, i := range order {
		r, line := h.Records[i], h.Lines[i]
		switch r.K {
		case KindGW:
			if r.T <= m.stop {
				gwRecs = append(gwRecs, i)
			}
		case KindFault:
			if r.T <= m.stop {
				m.faultLines = append(m.faultLines, line)
				if r.Ev == "end" {
					m.faults++
					m.lastFault = max(m.lastFault, r.T)
				}
			}
		case KindOp:
			if r.T <= m.stop {
				m.ops++
			}
			if r.Op != "hello" {
				m.addOp(r, line)
			}
		case KindNet:
			if r.T > m.stop {
				break
			}
			switch r.Ev {
			case "drop":
				for _, p := range r.GWs {
					m.cuts = append(m.cuts, netCut{x: r.GW, y: p, out: strings.Contains(r.Detail, "out"),
						lossy: !strings.Contains(r.Detail, "p=1.00"), a: r.T, b: inf, line: line})
				}
				m.gwLines = append(m.gwLines, line)
			case "heal":
				for i := range m.cuts {
					if m.cuts[i].x == r.GW && m.cuts[i].b == inf {
						m.cuts[i].b = r.T
						m.lastFault = max(m.lastFault, r.T+ms(rejoinInterval))
					}
				}
				m.gwLines = append(m.gwLines, line)
			}
		case KindStall:
			m.stalls = append(m.stalls, window{a: r.From, b: r.T + stallDrain, line: line, why: "harness stalled"})
		case KindEnd:
			if c := m.conns[r.C]; c != nil && c.endLine == 0 {
				c.endReason, c.endT, c.endLine = r.Reason, r.T, line
			}
		case KindObs:
			if r.T <= m.stop {
				m.ops++
				m.addObs(r, line)
			}
		}
	}
	m.buildGateways(gwRecs)
	for _, cs := range m.byKey {
		slices.SortFunc(cs, func(a, b *connModel) int { return cmpF(a.helloSent, b.helloSent) })
	}
	for _, c := range m.conns {
		slices.SortFunc(c.reqs, func(a, b req) int { return cmpF(a.t, b.t) })
	}
	for _, gets := range m.gets {
		slices.SortFunc(gets, func(a, b *obsModel) int { return cmpF(a.sent, b.sent) })
	}
	for _, ss := range m.streams {
		for _, s := range ss {
			slices.SortFunc(s.events, func(a, b *obsModel) int { return cmpF(a.t, b.t) })
			if c := m.conns[s.id]; c != nil && c.endLine != 0 {
				s.end = c.endT
			}
		}
	}
	for _, c := range m.conns {
		m.settle(c)
	}
	return m
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

// deadlineOn is session c's ghost deadline as gateway o sees it: the
// earliest of its causes, each moved past the network faults that kept o
// from hearing the gateway that writes it. A lease helps only when that
// gateway owns the session: a newer epoch written elsewhere cannot be
// known before o hears its writer again.
func (m *model) deadlineOn(c *connModel, o string) (float64, string) {
	best, why := inf, ""
	for _, k := range c.causes {
		t := k.t
		if k.writer != "" && k.writer != o {
			t = m.deafDeadline(o, k.writer, c.endAct, t, k.writer == c.gw)
		}
		if t < best {
			best, why = t, k.why
		}
	}
	return best, why
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

// recordAt returns the record on a history line.
func (m *model) recordAt(line int) *Record {
	i, ok := m.byLine[line]
	if !ok {
		return nil
	}
	return &m.h.Records[i]
}

func cmpF(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (m *model) addHello(r Record, line int) {
	c := &connModel{id: r.C, role: r.Role, user: r.User, dev: r.Dev, gw: r.GW, life: r.Life, helloSent: r.Sent,
		helloT: r.T, helloErr: r.Err, helloLine: line, welcomed: r.Err == "" && r.Epoch > 0, epoch: r.Epoch,
		session: r.Session, silentAt: inf, closeAt: inf, byeSent: inf, byeT: inf, endT: inf, prev: r.Prev}
	if r.Gateway != "" {
		c.gw = r.Gateway
	}
	c.opLines = append(c.opLines, line)
	if r.Err != "" {
		c.errs = append(c.errs, opErr{op: r.Op, err: r.Err, t: r.T, line: line})
	}
	if c.welcomed {
		c.reqs = append(c.reqs, req{r.T, line})
		st := r.Status
		if st == "" {
			st = "available"
		}
		c.statuses = append(c.statuses, statusOp{sent: r.Sent, recv: r.T, status: st, line: line})
	}
	m.conns[r.C] = c
	k := [2]string{r.User, r.Dev}
	m.byKey[k] = append(m.byKey[k], c)
}

func (m *model) addOp(r Record, line int) {
	c := m.conns[r.C]
	if c == nil {
		return
	}
	c.opLines = append(c.opLines, line)
	if r.Err != "" {
		c.errs = append(c.errs, opErr{op: r.Op, err: r.Err, t: r.T, line: line})
	}
	sent := r.Sent
	if sent == 0 {
		sent = r.T
	}
	switch r.Op {
	case "hb":
		if r.T < c.silentAt {
			c.reqs = append(c.reqs, req{r.T, line})
		}
	case "silent":
		if r.T < c.silentAt {
			c.silentAt, c.silentLine = r.T, line
		}
	case "close":
		if r.T < c.closeAt {
			c.closeAt, c.closeLine = r.T, line
		}
	case "bye":
		c.byeSent, c.byeLine, c.byeOK = sent, line, r.Err == ""
		if c.byeOK {
			c.byeT = r.T
		}
		c.reqs = append(c.reqs, req{sent, line})
	case "status":
		recv := r.T
		if r.Err != "" {
			recv = inf
		}
		c.statuses = append(c.statuses, statusOp{sent: sent, recv: recv, status: r.Status, line: line})
		c.reqs = append(c.reqs, req{sent, line})
	default:
		c.reqs = append(c.reqs, req{sent, line})
	}
}

func (m *model) addObs(r Record, line int) {
	o := &obsModel{gw: r.GW, life: r.Life, src: r.Src, c: r.C, sent: r.Sent, t: r.T, line: line,
		byUser: make(map[string]*Presence, len(r.P))}
	if o.src != "get" || o.sent == 0 {
		o.sent = r.T
	}
	for i := range r.P {
		o.byUser[r.P[i].User] = &r.P[i]
	}
	m.obs = append(m.obs, o)
	switch o.src {
	case "get":
		m.gets[o.gw] = append(m.gets[o.gw], o)
		if c := m.conns[o.c]; c != nil {
			c.reqs = append(c.reqs, req{o.sent, line})
		}
	case "event":
		var s *streamModel
		for _, x := range m.streams[o.gw] {
			if x.id == o.c {
				s = x
			}
		}
		if s == nil {
			s = &streamModel{id: o.c, gw: o.gw, life: o.life, start: o.t, end: inf}
			if c := m.conns[o.c]; c != nil {
				s.start = c.helloT
			}
			m.streams[o.gw] = append(m.streams[o.gw], s)
		}
		s.events = append(s.events, o)
	}
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
					g.down = append(g.down, window{a: o.at, b: r.T + m.b.recovery, line: o.line, why: "paused"})
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
			if o := downAt[r.GW]; o != nil {
				g.down = append(g.down, window{a: o.at, b: r.T + m.b.recovery, line: o.line, why: o.why})
				g.deaths[len(g.deaths)-1].ready = r.T
				delete(downAt, r.GW)
				m.lastFault = max(m.lastFault, r.T)
			}
		}
	}
	for name, o := range downAt {
		m.gw[name].down = append(m.gw[name].down, window{a: o.at, b: inf, line: o.line, why: o.why})
	}
	for name, o := range stopAt {
		m.gw[name].pauses = append(m.gw[name].pauses, window{a: o.at, b: inf, line: o.line, why: "paused"})
		m.gw[name].down = append(m.gw[name].down, window{a: o.at, b: inf, line: o.line, why: "paused"})
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

// settle computes a connection's end act, ghost deadline and healthy end.
func (m *model) settle(c *connModel) {
	c.endAct, c.deadline, c.healthyEnd = inf, inf, inf
	if !c.welcomed {
		return
	}
	act := func(t float64, why string, line int) {
		if t < c.endAct {
			c.endAct, c.endWhy, c.endWhyLine = t, why, line
		}
	}
	writer := c.gw
	dl := func(t float64, why string) {
		c.causes = append(c.causes, endCause{t: t, why: why, writer: writer})
		if t < c.deadline {
			c.deadline, c.deadlineWhy = t, why
		}
	}
	p := m.b.prop
	if c.byeSent < inf {
		act(c.byeSent, "bye", c.byeLine)
		if c.byeOK {
			dl(m.extendForPauses(c.gw, c.byeSent, c.byeT+p), "bye answered + propagation")
		}
	}
	if c.closeAt < inf {
		act(c.closeAt, "closed by the client", c.closeLine)
		dl(m.extendForPauses(c.gw, c.closeAt, c.closeAt+p), "close + propagation")
	}
	if c.silentAt < inf {
		act(c.silentAt, "client went silent", c.silentLine)
		last := c.lastReqBefore(c.silentAt).t
		dl(m.extendForPauses(c.gw, last, last+m.b.silent), "last request + silent expiry")
	}
	// A later hello of the same (user, device) supersedes this session once
	// welcomed.
	for _, o := range m.byKey[[2]string{c.user, c.dev}] {
		if o == c || o.helloSent <= c.helloSent {
			continue
		}
		act(o.helloSent, "a newer connection of the same device", o.helloLine)
		if o.welcomed && o.epoch > c.epoch {
			writer = o.gw
			dl(m.extendForPauses(o.gw, o.helloT, o.helloT+p), "newer epoch welcomed on "+o.gw+" + propagation")
			writer = c.gw
		}
		break
	}
	// Its gateway died.
	if d := m.deathDuring(c.gw, c.helloT, min(c.endAct, c.endT, m.stop)); d != nil {
		act(d.at, d.kind+" of its gateway", d.line)
		if d.kind == "term" {
			dl(min(d.exit, d.at+m.b.drain)+p, "SIGTERM: drained, exit + propagation")
		}
		// The survivors' leases, or the new incarnation, end it: no write
		// of the dead gateway is needed.
		writer = ""
		dl(d.at+m.b.crash, d.kind+" + crash expiry (lease)")
		if d.kind != "term" && d.ready < inf {
			dl(d.ready+m.b.recovery, "the restarted gateway's new incarnation ends the old one's sessions")
		}
		writer = c.gw
	}
	// The gateway closed it for some other reason.
	if c.endLine != 0 && c.endT < c.endAct {
		act(c.endT, "closed by the gateway: "+c.endReason, c.endLine)
		dl(m.extendForPauses(c.gw, c.endT, c.endT+p), "gateway closed it + propagation")
	}
	// Heartbeating until the first gap a timeout could legitimately end.
	limit := m.b.timeout - m.b.grace
	c.healthyEnd = c.endAct
	last := c.helloT
	for _, r := range c.reqs {
		if r.t >= c.endAct {
			break
		}
		if r.t-last >= limit {
			c.healthyEnd = min(c.healthyEnd, last+limit)
			break
		}
		last = r.t
	}
	if c.endAct < inf && c.endAct-last >= limit {
		c.healthyEnd = min(c.healthyEnd, last+limit)
	}
	if m.stop < inf && m.stop-last >= limit {
		c.healthyEnd = min(c.healthyEnd, last+limit)
	}
}

// allowedStatuses returns the statuses session c may show at some time in
// [a, b]: a status set by op k is current from when it was sent until the
// next one was answered and had time to propagate.
func (m *model) allowedStatuses(c *connModel, a, b float64) []string {
	var out []string
	for k, s := range c.statuses {
		until := inf
		if k+1 < len(c.statuses) {
			until = c.statuses[k+1].recv + m.b.prop
		}
		if s.sent <= b && a <= until && !slices.Contains(out, s.status) {
			out = append(out, s.status)
		}
	}
	return out
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

// findSession returns the entry of p for (device, epoch, gateway).
func findSession(p *Presence, dev string, epoch uint64, gw string) *SessionInfo {
	if p == nil {
		return nil
	}
	for i := range p.Sessions {
		s := &p.Sessions[i]
		if s.Device == dev && s.Epoch == epoch && s.Gateway == gw {
			return s
		}
	}
	return nil
}
