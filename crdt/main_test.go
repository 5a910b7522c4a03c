package crdt

import (
	"flag"
	"os"
	"testing"

	_ "pgregory.net/rapid" // registers -rapid.checks
)

// defaultRapidChecks is how many cases each property runs under a plain
// `go test` (and so under `make test`): 1,000 per law, ten times
// rapid's own default.
const defaultRapidChecks = "1000"

// TestMain raises rapid's default of 100 checks per property to 1,000 unless
// the run chose a number itself (-rapid.checks or RAPID_CHECKS) or asked for
// a quick run with -short, where rapid's default (divided by 5) stands.
func TestMain(m *testing.M) {
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) {
		if f.Name == "rapid.checks" {
			explicit = true
		}
	})
	if _, ok := os.LookupEnv("RAPID_CHECKS"); ok {
		explicit = true
	}
	if !explicit && !testing.Short() {
		if err := flag.Set("rapid.checks", defaultRapidChecks); err != nil {
			panic(err)
		}
	}
	os.Exit(m.Run())
}
