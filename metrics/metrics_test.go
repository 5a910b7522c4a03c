package metrics

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/rollcall/rollcall/internal/testkit"
)

// TestScrapeAfterConnectStatusSendExpiry runs two gateways, scrapes both
// before and after a connect, a status change, a send across gateways and
// an expiry, and checks that each counter moved by exactly what happened,
// on the gateway where it happened.
func TestScrapeAfterConnectStatusSendExpiry(t *testing.T) {
	const timeout = time.Second
	gws := startGateways(t, 2, timeout, false)
	g0, g1 := gws[0], gws[1]
	before0, before1 := g0.scrape(t), g1.scrape(t)
	moved := func(what string, after, before scrape, name string, want float64, labels ...string) {
		t.Helper()
		if got := after.value(name, labels...) - before.value(name, labels...); got != want {
			t.Errorf("%s: %s%v moved by %v, want %v", what, name, labels, got, want)
		}
	}
	// g1 has merged n of g0's writes, as deltas or through anti-entropy.
	merged := func(n int) func() bool {
		return func() bool {
			s := g1.scrape(t)
			return s.value("rollcall_deltas_received_total")-before1.value("rollcall_deltas_received_total")+
				s.value("rollcall_gossip_sync_records_received_total")-before1.value("rollcall_gossip_sync_records_received_total") >= float64(n)
		}
	}

	// A connect on g0, seen by g1. Each write waits for the previous one
	// to reach g1, so none is coalesced with another.
	alice := g0.dial(t, "alice", "phone", nil)
	alice.Heartbeat(timeout / 5)
	testkit.WaitFor(t, 10*time.Second, "g1 to merge alice's connect", merged(1))
	// A status change.
	alice.Send(map[string]any{"op": "status", "status": "busy", "id": 1})
	alice.Expect("ok", replyWithin)
	testkit.WaitFor(t, 10*time.Second, "g1 to merge alice's status", merged(2))
	// A send from g1 to alice on g0.
	bob := g1.dial(t, "bob", "laptop", nil)
	bob.Heartbeat(timeout / 5)
	bob.Send(map[string]any{"op": "send", "to": "alice", "body": map[string]any{"text": "hi"}, "id": 2})
	if ok := bob.Expect("ok", replyWithin); ok["delivered"] != 1.0 {
		t.Fatalf("send: %v", ok)
	}
	alice.Expect("message", replyWithin)
	// An expiry: carol says nothing after hello.
	carol := g0.dial(t, "carol", "tablet", nil)
	carol.Expect("error", replyWithin) // expired
	testkit.WaitFor(t, 10*time.Second, "g1 to show carol expired", func() bool {
		return g1.scrape(t).value("rollcall_sessions", "owner", "remote", "state", "expired") == 1
	})
	testkit.WaitFor(t, 10*time.Second, "g1 to merge g0's five writes", merged(5))
	after0, after1 := g0.scrape(t), g1.scrape(t)

	// g0: two sessions opened, one expired; its writes; the message it
	// delivered, routed to it by g1.
	moved("g0", after0, before0, "rollcall_sessions_opened_total", 2)
	moved("g0", after0, before0, "rollcall_sessions_expired_total", 1)
	moved("g0", after0, before0, "rollcall_sessions_disconnected_total", 0)
	moved("g0", after0, before0, "rollcall_requests_total", 2, "op", "hello")
	moved("g0", after0, before0, "rollcall_requests_total", 1, "op", "status")
	moved("g0", after0, before0, "rollcall_request_errors_total", 0)
	moved("g0", after0, before0, "rollcall_deltas_written_total", 5) // alice's connect and status, carol's connect and expiry, carol's last seen
	moved("g0", after0, before0, "rollcall_messages_delivered_total", 1)
	moved("g0", after0, before0, "rollcall_gossip_messages_received_total", 1, "type", "route")
	moved("g0", after0, before0, "rollcall_gossip_messages_sent_total", 1, "type", "route-ack", "transport", "stream")
	moved("g0", after0, before0, "rollcall_sessions", 1, "owner", "local", "state", "active")
	moved("g0", after0, before0, "rollcall_sessions", 1, "owner", "local", "state", "expired")
	moved("g0", after0, before0, "rollcall_sessions", 1, "owner", "remote", "state", "active")
	if hb := after0.value("rollcall_requests_total", "op", "hb") - before0.value("rollcall_requests_total", "op", "hb"); hb < 1 {
		t.Errorf("g0 counted %v heartbeats from alice", hb)
	}

	// g1: bob's session and his send, routed over a stream to g0; g0's
	// five writes merged, each merged delta timed.
	moved("g1", after1, before1, "rollcall_sessions_opened_total", 1)
	moved("g1", after1, before1, "rollcall_sessions_expired_total", 0)
	moved("g1", after1, before1, "rollcall_requests_total", 1, "op", "send")
	moved("g1", after1, before1, "rollcall_route_failures_total", 0)
	moved("g1", after1, before1, "rollcall_gossip_messages_sent_total", 1, "type", "route", "transport", "stream")
	moved("g1", after1, before1, "rollcall_gossip_messages_received_total", 1, "type", "route-ack")
	moved("g1", after1, before1, "rollcall_deltas_received_total", 0, "result", "invalid")
	applied := after1.value("rollcall_deltas_received_total", "result", "applied") - before1.value("rollcall_deltas_received_total", "result", "applied")
	stale := after1.value("rollcall_deltas_received_total", "result", "stale") - before1.value("rollcall_deltas_received_total", "result", "stale")
	if applied < 1 || applied+stale != 5 {
		// Every write reaches g1 as one delta (eager mode); one that
		// anti-entropy brought first is stale when its delta comes.
		t.Errorf("g1 deltas: %v applied, %v stale; want 5 in all, at least one applied", applied, stale)
	}
	moved("g1", after1, before1, "rollcall_propagation_lag_seconds", applied)
	if sum := after1["rollcall_propagation_lag_seconds"].Metric[0].Histogram.GetSampleSum(); sum <= 0 || sum > 10 {
		t.Errorf("g1 propagation lag sum %vs", sum)
	}
	moved("g1", after1, before1, "rollcall_sessions", 1, "owner", "remote", "state", "active")  // alice
	moved("g1", after1, before1, "rollcall_sessions", 1, "owner", "remote", "state", "expired") // carol
	for _, s := range []scrape{after0, after1} {
		if s.value("rollcall_gossip_members", "state", "alive") != 2 || s.value("rollcall_gossip_members_down") != 0 {
			t.Errorf("members: %v alive, %v down", s.value("rollcall_gossip_members", "state", "alive"), s.value("rollcall_gossip_members_down"))
		}
		for _, name := range []string{"rollcall_memberlist_health_score", "go_goroutines", "rollcall_gossip_sent_bytes_total"} {
			if s[name] == nil {
				t.Errorf("%s missing", name)
			}
		}
	}
	if after0.value("rollcall_gossip_sent_bytes_total", "type", "deltas", "transport", "packet") <= before0.value("rollcall_gossip_sent_bytes_total", "type", "deltas", "transport", "packet") {
		t.Error("g0 sent no delta bytes")
	}

	// A crash: g1 stops without a word. g0 marks it down once, by its
	// lease or by memberlist's verdict, whichever comes first, and shows
	// bob expired.
	g1.c.Shutdown() //nolint:errcheck // a crash
	g1.n.Close()
	testkit.WaitFor(t, 10*time.Second, "g0 to mark g1 down", func() bool { return g0.scrape(t).value("rollcall_gossip_members_down") == 1 })
	crashed := g0.scrape(t)
	if got := crashed.value("rollcall_gossip_leases_expired_total") + crashed.value("rollcall_gossip_member_failures_total", "state", "dead") -
		after0.value("rollcall_gossip_leases_expired_total") - after0.value("rollcall_gossip_member_failures_total", "state", "dead"); got != 1 {
		t.Errorf("g1 marked down %v times (leases expired + member failures), want 1", got)
	}
	moved("g0 after the crash", crashed, after0, "rollcall_gossip_member_failures_total", 0, "state", "left")
	moved("g0 after the crash", crashed, after0, "rollcall_sessions", -1, "owner", "remote", "state", "active")
	moved("g0 after the crash", crashed, after0, "rollcall_sessions", 1, "owner", "remote", "state", "expired")
}

// exercise does a bit of everything on a cluster of two gateways, with
// user, device and group names that must never show up in a label.
func exercise(t *testing.T, gws []*gateway, timeout time.Duration) []string {
	names := []string{"zed-user-name", "zed-device-name", "zed-group-name", "zed-peer-name", "zed-silent-name"}
	a := gws[0].dial(t, names[0], names[1], map[string]any{"groups": []string{names[2]}})
	a.Heartbeat(timeout / 5)
	b := gws[1].dial(t, names[3], names[1], nil)
	b.Heartbeat(timeout / 5)
	b.Send(map[string]any{"op": "sub", "users": []string{names[0]}, "group": names[2], "id": 1})
	b.Expect("ok", replyWithin)
	a.Send(map[string]any{"op": "status", "status": "away", "id": 2})
	a.Expect("ok", replyWithin)
	b.Send(map[string]any{"op": "send", "to": names[0], "body": "x", "id": 3})
	b.Expect("ok", replyWithin)
	b.Send(map[string]any{"op": names[3], "id": 4}) // an unknown op, named like a user
	if e := b.Expect("error", replyWithin); e["code"] != "unknown_op" {
		t.Fatalf("unknown op: %v", e)
	}
	s := gws[0].dial(t, names[4], names[1], nil)
	s.Expect("error", replyWithin) // expired
	a.Send(map[string]any{"op": "bye", "id": 5})
	a.Expect("ok", replyWithin)
	return names
}

// TestMetricsFollowNamingConventions lints every metric a gateway serves,
// memberlist's included, with client_golang's promlint: counters end in
// _total, units are base units spelled out, names are snake case, every
// metric has help.
func TestMetricsFollowNamingConventions(t *testing.T) {
	const timeout = time.Second
	gws := startGateways(t, 2, timeout, true)
	exercise(t, gws, timeout)
	testkit.WaitFor(t, 10*time.Second, "memberlist's push/pull metrics", func() bool {
		return gws[0].scrape(t).value("rollcall_memberlist_pushpull_seconds") > 0
	})
	problems, err := testutil.GatherAndLint(gws[0].reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
	fams, err := gws[0].reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var ours []string
	for _, f := range fams {
		name := f.GetName()
		switch {
		case strings.HasPrefix(name, "rollcall_"):
			ours = append(ours, name)
		case strings.HasPrefix(name, "go_"), strings.HasPrefix(name, "process_"), strings.HasPrefix(name, "promhttp_"):
		default:
			t.Errorf("metric %s: not in the rollcall_ namespace", name)
		}
	}
	for _, want := range []string{"rollcall_memberlist_members", "rollcall_memberlist_udp_sent_bytes_total",
		"rollcall_memberlist_probe_seconds", "rollcall_sessions", "rollcall_gossip_members"} {
		if !slices.Contains(ours, want) {
			t.Errorf("%s not served", want)
		}
	}
	if s := gws[0].scrape(t); s.value("rollcall_memberlist_members", "node_state", "alive") < 1 || s.value("rollcall_memberlist_udp_sent_bytes_total") == 0 {
		t.Errorf("memberlist's metrics did not move: members %v, udp bytes %v",
			s.value("rollcall_memberlist_members", "node_state", "alive"), s.value("rollcall_memberlist_udp_sent_bytes_total"))
	}
}

// boundedLabels are the only label names rollcall_ metrics use, each with
// values from a closed set.
func boundedLabels() map[string]*regexp.Regexp {
	code := regexp.MustCompile(`^[a-z_]+$`)
	return map[string]*regexp.Regexp{
		"op":         regexp.MustCompile(`^(unknown|hello|hb|status|account|join|leave|get|group|locate|sub|unsub|send|bye|refresh|meta|track|untrack)$`),
		"code":       code,
		"reason":     code,
		"result":     regexp.MustCompile(`^(applied|stale|invalid)$`),
		"owner":      regexp.MustCompile(`^(local|remote)$`),
		"state":      regexp.MustCompile(`^(active|disconnected|expired|alive|dead|left)$`),
		"kind":       regexp.MustCompile(`^(user|group)$`),
		"type":       regexp.MustCompile(`^(invalid|deltas|alive|pull|sync|route|route-ack|key|state|leaving|sync-page|pull-page|kick|region-deltas|region-alive|region-sync|route-via|kick-via|bridge-wan|listed)$`),
		"outcome":    regexp.MustCompile(`^(started|done|abandoned)$`),
		"transport":  regexp.MustCompile(`^(packet|stream|broadcast|pushpull)$`),
		"node_state": regexp.MustCompile(`^(alive|suspect|dead|left)$`),
		"quantile":   regexp.MustCompile(`^[0-9.]+$`),
	}
}

// TestNoLabelCarriesAUserName exercises a cluster with distinctive user,
// device and group names and checks that no label value of any metric
// holds one, and that every label of ours takes its values from a closed
// set: a label fed from client input would make a series per user.
func TestNoLabelCarriesAUserName(t *testing.T) {
	const timeout = time.Second
	gws := startGateways(t, 2, timeout, true)
	names := exercise(t, gws, timeout)
	bounded := boundedLabels()
	for _, g := range gws {
		s := g.scrape(t)
		if s.value("rollcall_request_errors_total", "op", "unknown", "code", "unknown_op") == 0 && g == gws[1] {
			t.Error("the unknown op was not counted")
		}
		for name, f := range s {
			for _, m := range f.Metric {
				for _, l := range m.Label {
					for _, n := range names {
						if strings.Contains(l.GetValue(), n) {
							t.Errorf("%s{%s=%q}: a label value holds the client's name %q", name, l.GetName(), l.GetValue(), n)
						}
					}
					if !strings.HasPrefix(name, "rollcall_") {
						continue
					}
					re, ok := bounded[l.GetName()]
					switch {
					case !ok:
						t.Errorf("%s: label %q is not one of the bounded labels", name, l.GetName())
					case !re.MatchString(l.GetValue()):
						t.Errorf("%s{%s=%q}: value outside the label's closed set", name, l.GetName(), l.GetValue())
					}
				}
			}
		}
	}
}

// TestDocsListEveryMetric keeps docs/metrics.md in step with what a
// gateway serves.
func TestDocsListEveryMetric(t *testing.T) {
	doc, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	const timeout = time.Second
	gws := startGateways(t, 1, timeout, true)
	fams, err := gws[0].reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if name := f.GetName(); strings.HasPrefix(name, "rollcall_") && !strings.Contains(string(doc), "`"+name+"`") {
			t.Errorf("%s is not documented in docs/metrics.md", name)
		}
	}
}

func TestMemberlistSinkRenamesUnknownKeys(t *testing.T) {
	s := &memberlistSink{known: memberlistMetrics()}
	for _, c := range []struct {
		key    []string
		suffix string
		want   string
	}{
		{[]string{"memberlist", "udp", "sent"}, "_total", "rollcall_memberlist_udp_sent_bytes_total"},
		{[]string{"memberlist", "pushPullNode"}, "", "rollcall_memberlist_pushpull_seconds"},
		{[]string{"memberlist", "newThing", "count"}, "_total", "rollcall_memberlist_new_thing_count_total"},
		{[]string{"memberlist", "weird-key.x"}, "", "rollcall_memberlist_weird_key_x"},
	} {
		if got := s.rename(c.key, c.suffix); len(got) != 1 || got[0] != c.want {
			t.Errorf("rename(%v) = %v, want %s", c.key, got, c.want)
		}
	}
	if got := s.rename([]string{"memberlist", "health", "score"}, ""); got != nil {
		t.Errorf("health score not dropped: %v", got)
	}
}
