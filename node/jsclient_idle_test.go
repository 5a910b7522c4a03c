package node_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestJSClientIdle runs jsclient/idle_test.mjs: the JavaScript client's
// idle timer, driven by a fake clock, fake input events and a fake
// WebSocket, sends away after idleAfter without input (a hidden page's
// time included), the status the app last set on the next input (one set
// while idle included), says away in the hello after a reconnect while
// idle, and sends nothing with idleAfter 0 or without an input target.
// Skips where no node is installed.
func TestJSClientIdle(t *testing.T) {
	nodeExe, module := jsModule(t)
	out, err := exec.Command(nodeExe, "--no-warnings", filepath.Join("jsclient", "idle_test.mjs"), module).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Fatalf("jsclient/idle_test.mjs: %v\n%s", err, out)
	}
}
