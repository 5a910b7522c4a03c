package bench

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat
// (100 on every Linux platform Go supports).
const clockTicks = 100

// ProcSample is a process's CPU time and resident set at one moment.
type ProcSample struct {
	CPUSeconds float64 // utime + stime
	RSSBytes   int64   // VmRSS
}

// SampleProc reads /proc/PID/stat and /proc/PID/status.
func SampleProc(procRoot string, pid int) (ProcSample, error) {
	dir := filepath.Join(procRoot, strconv.Itoa(pid))
	stat, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return ProcSample{}, fmt.Errorf("bench: pid %d: %w", pid, err)
	}
	cpu, err := ParseStatCPU(stat)
	if err != nil {
		return ProcSample{}, fmt.Errorf("bench: pid %d: %w", pid, err)
	}
	status, err := os.ReadFile(filepath.Join(dir, "status"))
	if err != nil {
		return ProcSample{}, fmt.Errorf("bench: pid %d: %w", pid, err)
	}
	rss, err := ParseStatusRSS(status)
	if err != nil {
		return ProcSample{}, fmt.Errorf("bench: pid %d: %w", pid, err)
	}
	return ProcSample{CPUSeconds: cpu, RSSBytes: rss}, nil
}

// ParseStatCPU returns utime+stime, in seconds, of a /proc/PID/stat line.
// The command name (field 2) may hold spaces and parentheses, so fields
// are counted from its last ')'.
func ParseStatCPU(stat []byte) (float64, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("stat: no command name")
	}
	f := strings.Fields(string(stat[i+1:]))
	// f[0] is field 3 (state); utime is field 14, stime 15.
	if len(f) < 13 {
		return 0, errors.New("stat: too few fields")
	}
	u, err1 := strconv.ParseUint(f[11], 10, 64)
	s, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("stat: bad utime/stime %q %q", f[11], f[12])
	}
	return float64(u+s) / clockTicks, nil
}

// ParseStatusRSS returns VmRSS, in bytes, of a /proc/PID/status file.
func ParseStatusRSS(status []byte) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("status: bad VmRSS line %q", sc.Text())
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil || kb < 0 {
			return 0, fmt.Errorf("status: bad VmRSS %q", f[0])
		}
		return kb << 10, nil
	}
	return 0, errors.New("status: no VmRSS")
}

// FindListeners returns the processes listening on the TCP ports of
// addrs (host:port, or ws:// URLs), from /proc/net/tcp{,6} and the socket
// inodes of /proc/*/fd. Processes this user may not inspect are missed.
func FindListeners(procRoot string, addrs []string) ([]int, error) {
	ports := map[uint16]bool{}
	for _, a := range addrs {
		if p, ok := addrPort(a); ok {
			ports[p] = true
		}
	}
	if len(ports) == 0 {
		return nil, errors.New("bench: no ports in the addresses")
	}
	inodes := map[string]bool{}
	for _, f := range []string{"net/tcp", "net/tcp6"} {
		b, err := os.ReadFile(filepath.Join(procRoot, f))
		if err != nil {
			continue
		}
		for _, in := range listenInodes(b, ports) {
			inodes[in] = true
		}
	}
	if len(inodes) == 0 {
		return nil, nil
	}
	ents, err := os.ReadDir(procRoot)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		fds, err := os.ReadDir(filepath.Join(procRoot, e.Name(), "fd"))
		if err != nil {
			continue
		}
		for _, fd := range fds {
			l, err := os.Readlink(filepath.Join(procRoot, e.Name(), "fd", fd.Name()))
			if err != nil {
				continue
			}
			if in, ok := strings.CutPrefix(l, "socket:["); ok && inodes[strings.TrimSuffix(in, "]")] {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids, nil
}

func addrPort(a string) (uint16, bool) {
	if i := strings.Index(a, "://"); i >= 0 {
		a = a[i+3:]
		if j := strings.IndexByte(a, '/'); j >= 0 {
			a = a[:j]
		}
	}
	_, p, err := net.SplitHostPort(a)
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseUint(p, 10, 16)
	return uint16(n), err == nil
}

// listenInodes returns the inodes of the LISTEN sockets on ports in a
// /proc/net/tcp table.
func listenInodes(table []byte, ports map[uint16]bool) []string {
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(table))
	sc.Scan() // header
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 10 || f[3] != "0A" {
			continue
		}
		_, portHex, ok := strings.Cut(f[1], ":")
		if !ok {
			continue
		}
		pb, err := hex.DecodeString(portHex)
		if err != nil || len(pb) != 2 {
			continue
		}
		if ports[uint16(pb[0])<<8|uint16(pb[1])] {
			out = append(out, f[9])
		}
	}
	return out
}
