package simcli

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// --runs below one is refused before any cluster starts.
func TestRunsFlag(t *testing.T) {
	var out, errOut bytes.Buffer
	err := Calibrate(context.Background(), []string{"--runs", "0"}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "--runs 0") {
		t.Fatalf("--runs 0: got %v, want an error naming it", err)
	}
	if out.Len() != 0 {
		t.Errorf("--runs 0 printed %q", out.String())
	}
}
