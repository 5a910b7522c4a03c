package chaos

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/rollcall/rollcall/protocol"
)

// Violation kinds: the four promises, and the processes themselves.
const (
	Convergence = "convergence" // running gateways disagree about a user whose state is not changing
	Lost        = "lost"        // a connected, heartbeating client shown offline or stale, or cut off
	Joined      = "joined"      // lost, on a gateway that just joined: shown offline within Bounds.JustJoined of its ready
	Ghost       = "ghost"       // an ended session shown online past its bound
	Order       = "order"       // an older epoch after a newer one, or a version going back
	Process     = "process"     // an agent crashed, failed to restart, or left uncleanly
)

// Violation is one broken promise, with the history lines that show it.
type Violation struct {
	Kind  string
	At    float64 // history ms
	Msg   string
	Lines []int  // history lines, most telling first
	User  string // when set, observation lines are shown for this user only
}

// Report is what Check found.
type Report struct {
	Ops        int // client operations and observations checked
	Faults     int
	Sessions   int
	Violations []Violation
	Bounds     Bounds
	h          *History
}

// Check checks a history against the promises and returns every
// violation, sorted by time. A history without a header gives one
// Process violation saying so.
func Check(h *History) *Report {
	m := buildModel(h)
	if m == nil {
		return &Report{h: h, Violations: []Violation{{Kind: Process, Msg: "the history has no run header"}}}
	}
	rep := &Report{h: h, Ops: m.ops, Faults: m.faults, Bounds: m.run.Bounds()}
	for _, c := range m.conns {
		if c.welcomed && c.role == "actor" {
			rep.Sessions++
		}
	}
	var vs []Violation
	vs = append(vs, m.checkLost()...)
	vs = append(vs, m.checkConnEnds()...)
	vs = append(vs, m.checkGhosts()...)
	vs = append(vs, m.checkUnknown()...)
	vs = append(vs, m.checkOrder()...)
	vs = append(vs, m.checkConvergence()...)
	vs = append(vs, m.checkProcesses()...)
	slices.SortStableFunc(vs, func(a, b Violation) int {
		if c := cmpF(a.At, b.At); c != 0 {
			return c
		}
		return strings.Compare(a.Kind, b.Kind)
	})
	rep.Violations = vs
	return rep
}

// Kinds counts the violations of each kind.
func (r *Report) Kinds() map[string]int {
	out := map[string]int{}
	for _, v := range r.Violations {
		out[v.Kind]++
	}
	return out
}

// maxLineShown bounds a history line as printed in a report.
const maxLineShown = 600

// Write prints every violation with its history lines.
func (r *Report) Write(w io.Writer) { r.WriteFirst(w, len(r.Violations)) }

// WriteFirst prints the first n violations with their history lines, and
// how many more there are.
func (r *Report) WriteFirst(w io.Writer, n int) {
	if n < len(r.Violations) {
		defer fmt.Fprintf(w, "... and %d more violations\n", len(r.Violations)-n)
	}
	for _, v := range r.Violations[:min(n, len(r.Violations))] {
		fmt.Fprintf(w, "%s at t=%.3fs: %s\n", v.Kind, v.At/1000, v.Msg)
		for _, l := range v.Lines {
			fmt.Fprintf(w, "    %6d  %s\n", l, r.lineText(l, v.User))
		}
	}
}

// lineText is a history line for a report: an observation line is cut
// down to the user's presence.
func (r *Report) lineText(line int, user string) string {
	if line < 1 || line > len(r.h.Raw) {
		return "?"
	}
	text := r.h.Raw[line-1]
	if user != "" && strings.Contains(text, `"k":"obs"`) {
		var rec Record
		if json.Unmarshal([]byte(text), &rec) == nil && len(rec.P) > 1 {
			var keep []protocol.Presence
			for _, p := range rec.P {
				if p.User == user {
					keep = append(keep, p)
				}
			}
			rec.P = keep
			if b, err := json.Marshal(rec); err == nil {
				text = string(b) + "  (only " + user + ")"
			}
		}
	}
	if len(text) > maxLineShown {
		text = text[:maxLineShown] + "…"
	}
	return text
}

// fmtT formats a history time in seconds for messages.
func fmtT(t float64) string {
	if t == inf {
		return "never"
	}
	return fmt.Sprintf("%.3fs", t/1000)
}

// name names a connection's session for messages.
func (c *connModel) name() string {
	return fmt.Sprintf("%s/%s epoch %d on %s (c%d)", c.user, c.dev, c.epoch, c.gw, c.id)
}

// uniq drops zero and repeated lines, keeping the order.
func uniq(lines ...int) []int {
	var out []int
	for _, l := range lines {
		if l > 0 && !slices.Contains(out, l) {
			out = append(out, l)
		}
	}
	return out
}
