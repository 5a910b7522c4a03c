package main

import (
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rollcall/rollcall/auth"
	"github.com/rollcall/rollcall/crdt"
	"github.com/rollcall/rollcall/dissem"
	"github.com/rollcall/rollcall/gossip"
	"github.com/rollcall/rollcall/node"
	"github.com/rollcall/rollcall/protocol"
)

// The Bounds section of docs/operations/security.md lists every bound with
// its default, the flag that changes it (or the constant that sets it) and
// what is seen past it. Its rows are tables of four columns: the bound, its
// default, its flags or "fixed (`pkg.Name`, ...)", and what happens.

const boundsDocPath = "../../docs/operations/security.md"

// boundsConstants are the values of the constants and defaults the Bounds
// tables may name; a row naming one the map lacks fails the test, so a new
// row gets its value checked too.
var boundsConstants = map[string]float64{
	"protocol.MaxUsersPerRequest":  protocol.MaxUsersPerRequest,
	"protocol.MaxTrackPerRequest":  protocol.MaxTrackPerRequest,
	"protocol.MaxSubscriptions":    protocol.MaxSubscriptions,
	"protocol.MaxGroups":           protocol.MaxGroups,
	"protocol.MaxNameLen":          protocol.MaxNameLen,
	"protocol.DefaultGroupPage":    protocol.DefaultGroupPage,
	"protocol.MaxGroupPage":        protocol.MaxGroupPage,
	"protocol.MaxEpoch":            protocol.MaxEpoch,
	"protocol.MaxTokenLen":         protocol.MaxTokenLen,
	"protocol.MaxStatusTextChars":  protocol.MaxStatusTextChars,
	"protocol.MaxStatusEmojiBytes": protocol.MaxStatusEmojiBytes,
	"protocol.MaxMetaBytes":        protocol.MaxMetaBytes,
	"protocol.MaxInfoBytes":        protocol.MaxInfoBytes,
	"protocol.MaxHTTPBodyBytes":    protocol.MaxHTTPBodyBytes,
	"protocol.MaxSendBodyBytes":    protocol.MaxSendBodyBytes,
	"dissem.MaxBodyBytes":          dissem.MaxBodyBytes,
	"dissem.MaxConcurrentAnswers":  dissem.MaxConcurrentAnswers,
	"node.Config.RouteTimeout":     node.DefaultRouteTimeout.Seconds(),
	"node.Config.UIMaxStreams":     node.DefaultUIMaxStreams,
	"node.Config.UIStreamQueue":    node.DefaultUIStreamQueue,
	"node.MinAdminTokenBytes":      node.MinAdminTokenBytes,
	"auth.MaxGrantNameLen":         auth.MaxGrantNameLen,
	"auth.MinSecretBytes":          auth.MinSecretBytes,
	"auth.MaxKeyFileBytes":         auth.MaxKeyFileBytes,
	"auth.MaxKeys":                 auth.MaxKeys,
	"auth.MaxKeyIDLen":             auth.MaxKeyIDLen,
	"crdt.MaxNameLen":              crdt.MaxNameLen,
	"crdt.MaxGroups":               crdt.MaxGroups,
	"crdt.MaxBatchDeltas":          crdt.MaxBatchDeltas,
	"crdt.MaxDigestOrigins":        crdt.MaxDigestOrigins,
	"crdt.MaxDigestSpans":          crdt.MaxDigestSpans,
	"crdt.MaxSyncRecords":          crdt.MaxSyncRecords,
	"crdt.Config.MaxPendingRanges": crdt.DefaultMaxPendingRanges,
	"gossip.Config.InboundQueue":   float64(gossip.DefaultConfig().InboundQueue),
	"gossip.Config.SyncPageBytes":  float64(gossip.DefaultConfig().SyncPageBytes),
	"gossip.Config.MaxQueue":       float64(gossip.DefaultConfig().MaxQueue),
}

var (
	// boundsQuantity is a number in a default cell, with its unit:
	// "100,000", "10 s", "1 min", "64 KiB", "2^53-1", "/64".
	boundsQuantity = regexp.MustCompile(`(?:(\d+)\^(\d+)(-1)?|(\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?)(?:\s?(ms|s|min|h|KiB|MiB)\b)?)`)
	// boundsConstant is a constant a flag cell names.
	boundsConstant = regexp.MustCompile("`((?:protocol|dissem|node|auth|crdt|gossip)\\.[A-Za-z.]+)`")
)

// boundsQuantities returns the numbers of a default cell, in order, in
// seconds and bytes.
func boundsQuantities(cell string) []float64 {
	var out []float64
	for _, m := range boundsQuantity.FindAllStringSubmatch(cell, -1) {
		if m[1] != "" {
			base, _ := strconv.Atoi(m[1])
			exp, _ := strconv.Atoi(m[2])
			v := math.Pow(float64(base), float64(exp))
			if m[3] != "" {
				v--
			}
			out = append(out, v)
			continue
		}
		v, err := strconv.ParseFloat(strings.ReplaceAll(m[4], ",", ""), 64)
		if err != nil {
			continue
		}
		switch m[5] {
		case "ms":
			v /= 1000
		case "min":
			v *= 60
		case "h":
			v *= 3600
		case "KiB":
			v *= 1 << 10
		case "MiB":
			v *= 1 << 20
		}
		out = append(out, v)
	}
	return out
}

// flagDefaultValue is a flag's default in seconds (a duration) or as a
// number.
func flagDefaultValue(def string) (float64, bool) {
	if d, err := time.ParseDuration(def); err == nil {
		return d.Seconds(), true
	}
	v, err := strconv.ParseFloat(def, 64)
	return v, err == nil
}

// Every row of the Bounds tables that names flags gives each flag's
// default, in the flags' order, as the first numbers of its default cell;
// every constant a row names holds a number its default cell gives; and
// every flag named is one of the agent's.
func TestBoundsTablesMatchTheCode(t *testing.T) {
	text, err := os.ReadFile(boundsDocPath)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(text)
	begin := strings.Index(doc, "\n## Bounds\n")
	if begin < 0 {
		t.Fatalf("%s has no Bounds section", boundsDocPath)
	}
	section := doc[begin+1:]
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	fs := newAgentFlagSet()
	rows, flags, constants := 0, 0, 0
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "| ") || strings.HasPrefix(line, "| Bound |") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		if len(cells) != 4 {
			t.Errorf("a Bounds row without four cells: %s", line)
			continue
		}
		rows++
		bound, def, by := strings.TrimSpace(cells[0]), cells[1], cells[2]
		got := boundsQuantities(def)
		names := flagName.FindAllStringSubmatch(by, -1)
		for i, m := range names {
			flags++
			f := fs.Lookup(m[1])
			if f == nil {
				t.Errorf("%q names --%s, which the agent does not have", bound, m[1])
				continue
			}
			want, ok := flagDefaultValue(f.DefValue)
			if !ok {
				t.Errorf("%q names --%s, whose default %q is not a number", bound, m[1], f.DefValue)
				continue
			}
			if i >= len(got) || got[i] != want {
				t.Errorf("%q: --%s defaults to %s, but the default cell says %q", bound, m[1], f.DefValue, def)
			}
		}
		for _, m := range boundsConstant.FindAllStringSubmatch(by, -1) {
			constants++
			want, ok := boundsConstants[m[1]]
			if !ok {
				t.Errorf("%q names %s, which boundsConstants lacks: add its value", bound, m[1])
				continue
			}
			found := false
			for _, v := range got {
				found = found || v == want
			}
			if !found {
				t.Errorf("%q: %s is %v, which the default cell %q does not give", bound, m[1], want, def)
			}
		}
	}
	// The section holds its tables: a parse that finds nothing checks
	// nothing.
	if rows < 50 || flags < 25 || constants < 25 {
		t.Errorf("found %d rows naming %d flags and %d constants in the Bounds section; the tables lost their shape", rows, flags, constants)
	}
}
