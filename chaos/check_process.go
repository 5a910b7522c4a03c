package chaos

import (
	"fmt"
)

// Processes: an agent exits only when the harness kills it; after
// SIGTERM it drains and exits 0 within its drain timeout + slack; a
// restart under the same name and ports comes up.

func (m *model) checkProcesses() []Violation {
	var out []Violation
	for _, gw := range m.gws {
		for _, d := range m.gw[gw].deaths {
			if d.at > m.stop {
				continue
			}
			switch d.kind {
			case "crash":
				out = append(out, Violation{Kind: Process, At: d.at,
					Msg:   fmt.Sprintf("%s exited on its own: %s", gw, d.exitStatus),
					Lines: uniq(append([]int{d.exitLine}, m.contextLines(d.at, gw)...)...)})
			case "term":
				if d.exit == inf {
					continue
				}
				// The drain timeout bounds the drain and the leave; the
				// process's own exit (its log's fsync on a busy disk) gets
				// the slack.
				took := d.exit - d.at
				if d.exitStatus != "exit 0" || took >= m.b.drain+m.b.slack {
					out = append(out, Violation{Kind: Process, At: d.exit,
						Msg: fmt.Sprintf("%s took %.0fms to leave after SIGTERM (drain timeout %.0fms + slack) and ended with %q",
							gw, took, m.b.drain, d.exitStatus),
						Lines: uniq(d.exitLine, d.line)})
				}
			}
		}
	}
	for _, l := range m.restartFailed {
		r := m.recordAt(l)
		out = append(out, Violation{Kind: Process, At: r.T, Msg: fmt.Sprintf("%s did not restart: %s", r.GW, r.Detail), Lines: []int{l}})
	}
	return out
}
