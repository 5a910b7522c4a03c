package procstat

import (
	"os"
	"testing"
)

func TestParse(t *testing.T) {
	cpu, err := parseStat([]byte("42 (my (odd) cmd) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 1 0 100 1000 10"))
	if err != nil || cpu != 3.0 {
		t.Fatalf("cpu %v %v, want 3.0s from 250+50 ticks", cpu, err)
	}
	if _, err := parseStat([]byte("42 (x) S 1")); err == nil {
		t.Fatal("short stat line accepted")
	}
	rss, err := parseRSS([]byte("Name:\tx\nVmRSS:\t  1234 kB\nThreads: 3\n"))
	if err != nil || rss != 1234<<10 {
		t.Fatalf("rss %v %v", rss, err)
	}
	if _, err := parseRSS([]byte("Name:\tx\n")); err == nil {
		t.Fatal("status without VmRSS accepted")
	}
}

func TestSelf(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	if _, err := CPU(os.Getpid()); err != nil {
		t.Fatal(err)
	}
	if r, err := RSS(os.Getpid()); err != nil || r <= 0 {
		t.Fatalf("rss %v %v", r, err)
	}
}
