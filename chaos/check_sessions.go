package chaos

import (
	"slices"

	"github.com/rollcall/rollcall/protocol"
)

// The checker's connections: what each client connection did, when its
// session ended and why, by when it must be offline everywhere, and while
// it counted as heartbeating.

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
		// Closed without bye: the gateway holds the session for
		// --disconnect-grace in case the client comes back.
		dl(m.extendForPauses(c.gw, c.closeAt, c.closeAt+m.b.dgrace+p), "close + disconnect grace + propagation")
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
	// Its gateway died. Counted from the hello's sending, not its welcome:
	// a gateway signalled between the two may still welcome the session
	// while it drains, and its death bounds that session like any other.
	if d := m.deathDuring(c.gw, c.helloSent, min(c.endAct, c.endT, m.stop)); d != nil {
		act(d.at, d.kind+" of its gateway", d.line)
		if d.kind == "term" {
			// The drain holds sessions online for --drain-grace (2s
			// by default) while their clients reconnect elsewhere, and
			// writes the rest disconnected when it ends. That is before
			// the exit and within the drain timeout (the agent refuses
			// a grace that is not below it), so this bound covers it
			// without adding the grace.
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
		if c.endReason == "eof" {
			// No closing error: the connection broke (a network fault),
			// and the gateway may take it for a drop and hold the
			// session for --disconnect-grace.
			dl(m.extendForPauses(c.gw, c.endT, c.endT+m.b.dgrace+p), "connection broke + disconnect grace + propagation")
		} else {
			dl(m.extendForPauses(c.gw, c.endT, c.endT+p), "gateway closed it + propagation")
		}
	}
	// An end the gateway must write itself (an expiry, a disconnect) is
	// not guaranteed if the gateway dies before that write is due: the
	// survivors' leases end the session then, by the crash bound.
	if d := m.deathDuring(c.gw, c.helloSent, m.stop); d != nil {
		c.deadline = inf
		for i := range c.causes {
			k := &c.causes[i]
			if k.writer == c.gw && k.t > d.at && d.at+m.b.crash > k.t {
				k.t, k.why = d.at+m.b.crash, k.why+", but its gateway died first: "+d.kind+" + crash expiry (lease)"
			}
			if k.t < c.deadline {
				c.deadline, c.deadlineWhy = k.t, k.why
			}
		}
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

// findSession returns the entry of p for (device, epoch, gateway).
func findSession(p *protocol.Presence, dev string, epoch uint64, gw string) *protocol.SessionInfo {
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
