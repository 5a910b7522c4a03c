package gossip

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// TestNoGatewayDependency keeps the gossip layer and the simulator, which
// drives it, free of the gateway: they share values with node through
// package cluster and declare the interfaces they need themselves, so that
// neither builds in the client protocol, token checks or HTTP endpoints.
func TestNoGatewayDependency(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not on PATH")
	}
	pkgs := []string{"github.com/rollcall/rollcall/gossip", "github.com/rollcall/rollcall/sim"}
	forbidden := []string{
		"github.com/rollcall/rollcall/node", // the gateway
		"github.com/rollcall/rollcall/auth", // token verification
		"github.com/golang-jwt/jwt",         // what auth builds on
		"github.com/go-jose/go-jose",
	}
	for _, pkg := range pkgs {
		out, err := exec.Command(goTool, "list", "-deps", pkg).Output()
		if err != nil {
			var exitErr *exec.ExitError
			if errors.As(err, &exitErr) {
				t.Fatalf("go list -deps %s: %v\n%s", pkg, err, exitErr.Stderr)
			}
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		for dep := range strings.FieldsSeq(string(out)) {
			for _, f := range forbidden {
				if dep == f || strings.HasPrefix(dep, f+"/") {
					t.Errorf("%s depends on %s", pkg, dep)
				}
			}
		}
	}
}
