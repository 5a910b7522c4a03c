package bench

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

const sampleMetrics = `# HELP rollcall_requests_total Client requests handled.
# TYPE rollcall_requests_total counter
rollcall_requests_total{op="hb"} 120
rollcall_requests_total{op="status"} 7
rollcall_requests_total{op="hello"} 3
rollcall_gossip_sent_bytes_total{transport="udp",type="delta"} 1000
rollcall_gossip_sent_bytes_total{transport="tcp",type="sync"} 24.5
rollcall_memberlist_broadcast_queue_messages{quantile="0.5"} NaN
rollcall_requests_total_other 99
go_goroutines 12 1700000000000
`

func TestBenchParseMetricsSumsWantedSeries(t *testing.T) {
	s, err := ParseMetrics(strings.NewReader(sampleMetrics), scrapedMetrics)
	if err != nil {
		t.Fatal(err)
	}
	if s[metricHeartbeats] != 120 || s[metricStatus] != 7 || s[metricGossipBytes] != 1024.5 {
		t.Fatalf("scraped %v", s)
	}
	s, err = ParseMetrics(strings.NewReader("go_goroutines 3\n"), scrapedMetrics)
	if _, ok := s[metricHeartbeats]; ok || err != nil {
		t.Fatalf("a server without the counter: %v %v", s, err)
	}
}

func TestBenchParseMetricsRefusesBadLines(t *testing.T) {
	for _, in := range []string{"novalue\n", "x{a=\"b\" 3\n", "x{a=\"b\"} three\n", "x 1 2 3\n", "{a=\"b\"} 1\n"} {
		if _, err := ParseMetrics(strings.NewReader(in), scrapedMetrics); err == nil {
			t.Errorf("%q accepted", in)
		}
	}
}

func TestBenchScrapeAll(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte(sampleMetrics))
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	s, ok := scrapeAll(t.Context(), srv.Client(), []string{addr, srv.URL})
	if !ok || s[metricHeartbeats] != 240 {
		t.Fatalf("two scrapes: %v %v", s, ok)
	}
	if _, ok := scrapeAll(t.Context(), srv.Client(), []string{addr, "127.0.0.1:1"}); ok {
		t.Fatal("an unreachable address counted as read")
	}
}

// FuzzParseMetrics: seed corpus testdata/fuzz/FuzzParseMetrics.
func FuzzParseMetrics(f *testing.F) {
	f.Add(sampleMetrics)
	f.Add("x{a=\"}\"} 1\n")
	f.Fuzz(func(t *testing.T, in string) {
		_, _ = ParseMetrics(strings.NewReader(in), scrapedMetrics)
	})
}
