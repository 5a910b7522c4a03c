package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
)

// Scraped are the counters a run reads from the gateways' /metrics, summed
// over the gateways; a counter none of them exposes is absent.
type Scraped map[string]float64

// Counters read from /metrics: the server-counted heartbeats and status
// requests, and the bytes of Rollcall gossip sent.
const (
	metricHeartbeats  = `rollcall_requests_total{op="hb"}`
	metricStatus      = `rollcall_requests_total{op="status"}`
	metricGossipBytes = `rollcall_gossip_sent_bytes_total`
)

var scrapedMetrics = []string{metricHeartbeats, metricStatus, metricGossipBytes}

// ParseMetrics sums, from a Prometheus text exposition, the samples of
// each wanted series: a bare name sums every series of that name, a name
// with one label matcher name{label="value"} only those carrying it.
func ParseMetrics(r io.Reader, want []string) (Scraped, error) {
	out := Scraped{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		name, labels, value, err := parseSample(line)
		if err != nil {
			return nil, err
		}
		if math.IsNaN(value) {
			continue
		}
		for _, w := range want {
			wn, wl, _ := strings.Cut(w, "{")
			if wn != name {
				continue
			}
			if wl != "" && !hasLabel(labels, strings.TrimSuffix(wl, "}")) {
				continue
			}
			out[w] += value
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("bench: metrics: %w", err)
	}
	return out, nil
}

func parseSample(line string) (name, labels string, value float64, err error) {
	rest := line
	if i := strings.IndexAny(line, "{ "); i >= 0 && line[i] == '{' {
		j := strings.LastIndexByte(line, '}')
		if j < i {
			return "", "", 0, fmt.Errorf("bench: metrics: bad line %q", line)
		}
		name, labels, rest = line[:i], line[i+1:j], line[j+1:]
	} else {
		var ok bool
		name, rest, ok = strings.Cut(line, " ")
		if !ok {
			return "", "", 0, fmt.Errorf("bench: metrics: bad line %q", line)
		}
	}
	f := strings.Fields(rest)
	if len(f) < 1 || len(f) > 2 || name == "" {
		return "", "", 0, fmt.Errorf("bench: metrics: bad line %q", line)
	}
	value, err = strconv.ParseFloat(f[0], 64)
	if err != nil {
		return "", "", 0, fmt.Errorf("bench: metrics: bad value in %q", line)
	}
	return name, labels, value, nil
}

// hasLabel reports whether a label set (a="x",b="y") holds the pair want
// (b="y"). Values holding commas or escaped quotes are not split apart,
// which the counters read here do not have.
func hasLabel(labels, want string) bool {
	for _, l := range strings.Split(labels, ",") {
		if strings.TrimSpace(l) == want {
			return true
		}
	}
	return false
}

// metricsURL is the /metrics URL of a gateway's HTTP address (host:port
// or a URL).
func metricsURL(a string) string {
	u := a
	if !strings.Contains(u, "://") {
		u = "http://" + u
	}
	if !strings.HasSuffix(u, "/metrics") {
		u = strings.TrimSuffix(u, "/") + "/metrics"
	}
	return u
}

// scrapeAll reads the wanted counters of every address and sums them; ok
// is false when any address could not be read (the sums are then
// partial and not used).
func scrapeAll(ctx context.Context, hc *http.Client, addrs []string) (Scraped, bool) {
	total := Scraped{}
	for _, a := range addrs {
		req, err := http.NewRequestWithContext(ctx, "GET", metricsURL(a), nil)
		if err != nil {
			return nil, false
		}
		resp, err := hc.Do(req)
		if err != nil {
			return nil, false
		}
		b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			return nil, false
		}
		s, err := ParseMetrics(bytes.NewReader(b), scrapedMetrics)
		if err != nil {
			return nil, false
		}
		for k, v := range s {
			total[k] += v
		}
	}
	return total, true
}
