package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSimCommand(t *testing.T) {
	var out, errb bytes.Buffer
	plot := filepath.Join(t.TempDir(), "p.svg")
	err := runSim(context.Background(), strings.Fields("--nodes 6 --changes 10 --duration 10s --format json --plot "+plot), &out, &errb)
	if err != nil {
		t.Fatalf("%v\n%s", err, errb.String())
	}
	var res map[string]any
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, out.String())
	}
	if res["nodes"].(float64) != 6 {
		t.Errorf("nodes = %v", res["nodes"])
	}
	if strings.Contains(out.String(), "wrote") || !strings.Contains(errb.String(), "wrote") {
		t.Error("messages belong on stderr, never on stdout")
	}

	// --cpuprofile writes a profile pprof reads (gzipped protobuf).
	prof := filepath.Join(t.TempDir(), "cpu.prof")
	out.Reset()
	if err := runSim(context.Background(), strings.Fields("--nodes 6 --changes 10 --duration 10s --cpuprofile "+prof), &out, &errb); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(prof); err != nil || len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Errorf("cpu profile: %v, %d bytes, not gzip", err, len(b))
	}
	if err := runSim(context.Background(), strings.Fields("--nodes 6 --cpuprofile "+filepath.Join(t.TempDir(), "no", "such", "dir")), &out, &errb); err == nil {
		t.Error("an unwritable --cpuprofile path gave no error")
	}

	out.Reset()
	if err := runSim(context.Background(), strings.Fields("--nodes 4 --changes 5 --duration 5s --format csv --sweep loss=0,0.1"), &out, &errb); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out.String(), "\n"); n != 3 {
		t.Errorf("sweep csv has %d lines:\n%s", n, out.String())
	}

	errb.Reset()
	if err := runSim(context.Background(), []string{"--help"}, &out, &errb); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(errb.String(), "-latency") || !strings.Contains(errb.String(), "a duration") {
		t.Errorf("help lacks flags or units:\n%s", errb.String())
	}
	if err := runSim(context.Background(), []string{"calibrate", "--help"}, &out, &errb); err != nil {
		t.Fatal(err)
	}
	if err := runSim(context.Background(), []string{"--nodes", "1"}, &out, &errb); err == nil {
		t.Error("accepted one node")
	}
}
