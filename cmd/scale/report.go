package main

// Formatting: the scenario tables and the verdicts.

import (
	"fmt"
	"strings"
	"time"
)

// fmtBytes formats n bytes in B, KiB, MiB or GiB with one decimal.
func fmtBytes(n uint64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	case n < 1<<30:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
}

// fmtDur formats d in seconds with one decimal, or milliseconds below one
// second.
func fmtDur(d time.Duration) string {
	if d < time.Second {
		return fmt.Sprintf("%d ms", d.Milliseconds())
	}
	return fmt.Sprintf("%.1f s", d.Seconds())
}

// fmtCount formats n with thousands separators.
func fmtCount[T int | uint64](n T) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// pages formats a count of sync messages.
func pages(n uint64) string {
	if n == 1 {
		return "1 page"
	}
	return fmtCount(n) + " pages"
}

// table renders rows of (label, value) under a title, labels aligned.
func table(title string, rows [][2]string) string {
	w := 0
	for _, r := range rows {
		w = max(w, len(r[0]))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "== %s\n", title)
	for _, r := range rows {
		fmt.Fprintf(&b, "  %-*s  %s\n", w, r[0], r[1])
	}
	b.WriteString("\n")
	return b.String()
}

// table renders a scenario's measurements.
func (r result) table() string {
	rows := [][2]string{{"what", r.about}}
	switch {
	case r.partitionKind:
		rows = append(rows, [2]string{"time to ready", "ready before the partition (readiness never reverts)"})
	case r.readyAfter >= 0:
		v := fmtDur(r.readyAfter) + " from the start of its process"
		if r.readyNode >= 0 {
			v += ", " + fmtDur(r.readyNode) + " from gossip.New"
		}
		rows = append(rows, [2]string{"time to ready", v})
	default:
		rows = append(rows, [2]string{"time to ready", "not ready within " + fmtDur(r.timeout) + ": " + r.why})
	}
	full := "not within " + fmtDur(r.timeout)
	if r.fullAfter >= 0 {
		full = fmtDur(r.fullAfter)
	}
	label := "time to hold all records"
	if r.partitionKind {
		label = "time to catch up (hold all)"
	}
	rows = append(rows, [2]string{label, full})
	senders := fmtCount(r.sendersMin)
	if r.sendersMax != r.sendersMin {
		senders += ".." + fmtCount(r.sendersMax)
	}
	rows = append(rows, [2]string{"records held", fmt.Sprintf("%s %s (%s remote), senders %s, expected %s",
		r.observed, fmtCount(r.held), fmtCount(r.remote), senders, fmtCount(r.target))})
	if r.heldAtReadyN {
		rows = append(rows, [2]string{"records held when ready", fmtCount(r.heldAtReady)})
	}
	if r.partitionKind {
		rows = append(rows, [2]string{"records held at the heal", fmtCount(r.heldAtStart)})
		if r.writesLeft > 0 {
			rows = append(rows, [2]string{"writes not made by the heal", fmtCount(r.writesLeft) + " (the senders were too busy)"})
		}
	}
	rows = append(rows,
		[2]string{"sync sent (senders, refused included)", fmt.Sprintf("%s records, %s, %s", fmtCount(r.syncRecordsSent),
			fmtBytes(r.syncBytesSent), pages(r.syncPagesSent))},
		[2]string{"sync received (" + r.observed + ")", fmt.Sprintf("%s records, %s, %s", fmtCount(r.syncRecordsRecv),
			fmtBytes(r.syncBytesRecv), pages(r.syncPagesRecv))},
		[2]string{"sender send errors", fmt.Sprintf("%d (answers dropped: %d)", r.sendErrors, r.answersDropped)},
		[2]string{"sender peak extra heap", fmt.Sprintf("%s (%s; live heap peak over its value after a GC at the start)",
			fmtBytes(r.senderExtra), r.senderExtraName)},
	)
	per := "n/a (no remote session held)"
	if r.remote > 0 {
		per = fmt.Sprintf("%.0f B per remote session", r.perRemote)
	}
	rows = append(rows, [2]string{"heap per remote session", fmt.Sprintf("%s live heap after a GC: %s", fmtBytes(r.heapAfter), per)})
	if r.remote > 0 {
		per = fmt.Sprintf("%.0f B per remote session", r.perRemoteSettled)
	}
	rows = append(rows, [2]string{"  " + fmtDur(settle) + " later", fmt.Sprintf("%s live heap after a GC: %s", fmtBytes(r.heapSettled), per)})
	title := r.name
	if r.timedOut {
		title += " (TIMED OUT)"
	}
	return table(title, rows)
}

// verdict is one target's outcome for one scenario.
type verdict struct {
	scenario, target, outcome, detail string
}

func (r result) verdicts() []verdict {
	var out []verdict
	readyTarget := fmt.Sprintf("holds all %s within %v and is ready only then", fmtCount(r.target), targetReady)
	switch {
	case r.partitionKind:
		t := fmt.Sprintf("catches up (holds all %s) within %v of the heal", fmtCount(r.target), targetReady)
		v := verdict{scenario: r.name, target: t, outcome: "PASS", detail: fmtDur(r.fullAfter)}
		if r.fullAfter < 0 || r.fullAfter > targetReady {
			v.outcome, v.detail = "FAIL", fmt.Sprintf("holds %s", fmtCount(r.held))
			if r.fullAfter >= 0 {
				v.detail = fmtDur(r.fullAfter)
			}
		}
		out = append(out, v)
	case r.checkReady:
		v := verdict{scenario: r.name, target: readyTarget, outcome: "FAIL"}
		switch {
		case r.readyAfter < 0:
			v.detail = fmt.Sprintf("not ready within %s, holds %s", fmtDur(r.timeout), fmtCount(r.held))
		case r.heldAtReady < r.target:
			v.detail = fmt.Sprintf("ready holding %s", fmtCount(r.heldAtReady))
		case r.fullAfter < 0 || r.fullAfter > targetReady:
			v.detail = "held all after " + fmtDur(r.fullAfter)
		default:
			v.outcome, v.detail = "PASS", fmt.Sprintf("all held and ready after %s", fmtDur(max(r.fullAfter, r.readyAfter)))
		}
		out = append(out, v)
	}
	if r.checkSender {
		v := verdict{scenario: r.name, target: "sender extra heap <= " + fmtBytes(targetSenderExtra), outcome: "PASS",
			detail: fmtBytes(r.senderExtra)}
		if r.senderExtra > targetSenderExtra {
			v.outcome = "FAIL"
		}
		if r.syncRecordsSent == 0 {
			v.detail += ", no sync sent"
		}
		out = append(out, v)
	}
	if r.checkHeap {
		v := verdict{scenario: r.name, target: fmt.Sprintf("heap per remote session <= %d B", targetHeapPerRemot)}
		switch {
		case r.remote == 0:
			v.outcome, v.detail = "n/a", "no remote session held"
		default:
			v.outcome = "PASS"
			if r.perRemote > targetHeapPerRemot {
				v.outcome = "FAIL"
			}
			v.detail = fmt.Sprintf("%.0f B (%.0f B %s later)", r.perRemote, r.perRemoteSettled, fmtDur(settle))
		}
		out = append(out, v)
	}
	return out
}

// verdicts renders every result's verdicts, one line each.
func verdicts(rs []result) string {
	var vs []verdict
	for _, r := range rs {
		vs = append(vs, r.verdicts()...)
	}
	ws, wt := 0, 0
	for _, v := range vs {
		ws, wt = max(ws, len(v.scenario)), max(wt, len(v.target))
	}
	var b strings.Builder
	b.WriteString("== verdicts\n")
	for _, v := range vs {
		fmt.Fprintf(&b, "  %-4s  %-*s  %-*s  %s\n", v.outcome, ws, v.scenario, wt, v.target, v.detail)
	}
	return b.String()
}
