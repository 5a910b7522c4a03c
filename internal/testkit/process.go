package testkit

import (
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/rollcall/rollcall/internal/portpick"
)

// BuildRollcall builds the rollcall command into the test's temporary
// directory and returns its path, for tests that run the agent as a
// process. args go to go build before the package (e.g. "-buildvcs=true").
func BuildRollcall(t testing.TB, args ...string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "rollcall")
	build := exec.Command("go", append(append([]string{"build", "-o", bin}, args...), "github.com/rollcall/rollcall/cmd/rollcall")...)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// FreeAddr returns a loopback address whose TCP and UDP ports are free and
// held for the test: no other test, in this binary or another, is handed
// it until the test ends, and the kernel never picks it for port 0.
func FreeAddr(t testing.TB) string {
	t.Helper()
	p, err := portpick.Loopback(true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Release)
	return p.Addr
}
