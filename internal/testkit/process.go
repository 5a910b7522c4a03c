package testkit

import (
	"os/exec"
	"path/filepath"
	"testing"
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
