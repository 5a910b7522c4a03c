package bench

import (
	"net"
	"os"
	"slices"
	"testing"
)

func TestBenchParseStatCPU(t *testing.T) {
	// a command name with spaces and a parenthesis; utime 250, stime 50
	stat := []byte("1234 (my (odd) cmd) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 8 0 100 1000000 500 18446744073709551615\n")
	cpu, err := ParseStatCPU(stat)
	if err != nil || cpu != 3 {
		t.Fatalf("cpu %v %v, want 3s", cpu, err)
	}
	for _, bad := range []string{"", "1234 (x) S 1 2", "1234 (x) S 1 1 1 0 -1 0 0 0 0 0 u s 0"} {
		if _, err := ParseStatCPU([]byte(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestBenchParseStatusRSS(t *testing.T) {
	rss, err := ParseStatusRSS([]byte("Name:\tx\nVmPeak:\t 9 kB\nVmRSS:\t    2048 kB\n"))
	if err != nil || rss != 2<<20 {
		t.Fatalf("rss %d %v", rss, err)
	}
	for _, bad := range []string{"Name: x\n", "VmRSS: 12 MB\n", "VmRSS: -1 kB\n"} {
		if _, err := ParseStatusRSS([]byte(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestBenchFindListenersFindsThisProcess(t *testing.T) {
	if _, err := os.Stat("/proc/net/tcp"); err != nil {
		t.Skip("no /proc")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	pids, err := FindListeners("/proc", []string{l.Addr().String()})
	if err != nil || !slices.Contains(pids, os.Getpid()) {
		t.Fatalf("listeners %v %v, want this process %d", pids, err, os.Getpid())
	}
	if _, err := SampleProc("/proc", os.Getpid()); err != nil {
		t.Fatal(err)
	}
	if _, err := FindListeners("/proc", []string{"no-port"}); err == nil {
		t.Fatal("an address without a port accepted")
	}
}

func TestBenchSourceAddr(t *testing.T) {
	for _, tc := range []struct {
		addr string
		g    int
		want string
	}{
		{"127.0.0.1:7400", 0, "127.0.0.2"},
		{"127.0.0.1:7400", 248, "127.0.0.250"},
		{"127.0.0.1:7400", 249, "127.0.0.2"},
		{"localhost:7400", 1, "127.0.0.3"},
		{"ws://127.0.0.1:7401/ws", 3, "127.0.0.5"},
		{"10.0.0.1:7400", 0, ""},
		{"[::1]:7400", 0, ""},
		{"gw.example.com:7400", 0, ""},
	} {
		got := sourceAddr(tc.addr, tc.g)
		if (got == nil) != (tc.want == "") || (got != nil && got.IP.String() != tc.want) {
			t.Errorf("sourceAddr(%s, %d) = %v, want %q", tc.addr, tc.g, got, tc.want)
		}
	}
}
