package crdt

import (
	"testing"

	"github.com/rollcall/rollcall/internal/datadriven"
)

// The scripts in testdata/ run through the shared data-driven runner; run
// with -rewrite to regenerate their expected output, then review the diff.

type ddCmd = datadriven.Cmd

func runDataDriven(t *testing.T, path string, handle func(t *testing.T, c *ddCmd) string) {
	t.Helper()
	datadriven.Run(t, path, handle)
}
