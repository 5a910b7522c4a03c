package chaos

import (
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/rollcall/rollcall/protocol"
)

// The checker's model of a history: gateways' down windows, connections
// with their sessions' lifetimes and deadlines, observations indexed by
// gateway and stream. Everything is in history milliseconds.

var inf = math.Inf(1)

// obsModel is one observation: a get answer or an event.
type obsModel struct {
	gw     string
	life   int
	src    string
	c      int
	sent   float64 // gets: when asked; events: = t
	t      float64
	line   int
	byUser map[string]*protocol.Presence
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
	prop, silent, crash, recovery, conv, grace, timeout, drain, rejoin, slack, joined float64
	// pause is the longest pause of a gateway that must not show its
	// sessions offline on the others (Bounds.PauseTolerance).
	pause float64
	// dgrace is --disconnect-grace: how long a dropped connection's
	// session may stay online before the usual bound starts.
	dgrace float64
}

func newBoundsMS(ri *RunInfo) boundsMS {
	b := ri.Bounds()
	return boundsMS{prop: ms(b.Propagation), silent: ms(b.SilentExpiry), crash: ms(b.CrashExpiry),
		recovery: ms(b.Recovery), conv: ms(b.Convergence), rejoin: ms(b.Rejoin), slack: ms(b.Slack), grace: ms(b.Grace), timeout: ms(b.Timeout), drain: ri.DrainMS,
		joined: ms(b.JustJoined), dgrace: ms(b.DisconnectGrace), pause: ms(b.PauseTolerance)}
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
		byUser: make(map[string]*protocol.Presence, len(r.P))}
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
