package sim

import (
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The simulator's libraries carry no command line and no plotting: those
// live in sim/simcli, which only cmd/rollcall imports. Neither sim nor
// sim/calibrate may import the flag package or depend on gonum (plotting,
// fonts and image codecs), and nothing else in the module may import
// sim/simcli, so that neither the libraries nor the agent drag them in.
func TestLibraryImportsNoCLI(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command on PATH")
	}
	const module = "github.com/rollcall/rollcall"
	libraries := []string{module + "/sim", module + "/sim/calibrate"}

	deps := goList(t, append([]string{"-deps"}, libraries...)...)
	for _, d := range goList(t, "-deps", module+"/sim") {
		// The simulator runs the protocol (dissem) over replicas (crdt):
		// no gateway, no gossip wiring, no tokens, no HTTP of ours.
		if strings.HasPrefix(d, module+"/") && d != module+"/crdt" && d != module+"/dissem" && d != module+"/sim" {
			t.Errorf("the simulator depends on %s; it needs only crdt and dissem", d)
		}
	}
	for _, d := range deps {
		if strings.HasPrefix(d, "gonum.org/") {
			t.Errorf("the simulator's libraries depend on %s; plotting belongs in sim/simcli", d)
		}
		if d == module+"/sim/simcli" {
			t.Errorf("the simulator's libraries depend on sim/simcli")
		}
	}

	for _, lib := range libraries {
		imports := goList(t, "-f", `{{join .Imports "\n"}}`, lib)
		if slices.Contains(imports, "flag") {
			t.Errorf("%s imports flag; the command line belongs in sim/simcli", lib)
		}
	}

	for _, line := range goList(t, "-f", `{{.ImportPath}} {{join .Imports " "}} {{join .TestImports " "}} {{join .XTestImports " "}}`, module+"/...") {
		pkg, imports, _ := strings.Cut(line, " ")
		if pkg == module+"/cmd/rollcall" || pkg == module+"/sim/simcli" {
			continue
		}
		if slices.Contains(strings.Fields(imports), module+"/sim/simcli") {
			t.Errorf("%s imports sim/simcli, which only cmd/rollcall may import", pkg)
		}
	}
}

// goList runs `go list args...` and returns its output's non-empty lines.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	out, err := exec.Command("go", append([]string{"list"}, args...)...).Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			err = fmt.Errorf("%w: %s", err, exit.Stderr)
		}
		t.Fatalf("go list %s: %v", strings.Join(args, " "), err)
	}
	var lines []string
	for _, l := range strings.Split(string(out), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}
