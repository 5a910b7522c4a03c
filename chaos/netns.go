package chaos

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
)

// Network faults (optional, Config.Netns): each agent runs in its own
// network namespace ("host"), all hosts joined by a bridge in a switch
// namespace, and the harness reaches them from the root namespace through
// a veth of its own on the same bridge. A fault is a set of iptables
// rules inside one host's namespace that drop what it receives from (or
// sends to) chosen peer hosts, all or at random: a partition, a one-way
// cut, packet loss. The harness's own traffic never matches them, so
// clients and observers keep talking to every gateway.
//
//	root ns: rcx<tag> 10.214.T.254 --+
//	                                 |  switch ns rcs<tag>: bridge br0
//	host ns rch<tag>-1: eth0 10.214.T.1 --+
//	host ns rch<tag>-2: eth0 10.214.T.2 --+ ...

// network is the namespaces of one run. Its methods are safe for
// concurrent use.
type network struct {
	tag    string
	subnet string // "10.214.T."
	hosts  []string

	mu    sync.Mutex
	rules map[int][]string // host index -> iptables rule specs in force
}

// netnsAvailable says why network faults cannot run here, or nil.
func netnsAvailable() error {
	if os.Geteuid() != 0 {
		return errors.New("network faults need root")
	}
	for _, tool := range []string{"ip", "iptables"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("network faults need %s", tool)
		}
	}
	return nil
}

func runCmd(name string, args ...string) error {
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// newNetwork builds the namespaces for n hosts. The caller must close it.
func newNetwork(n int) (*network, error) {
	pid := os.Getpid()
	nw := &network{tag: fmt.Sprintf("%d", pid%100000), subnet: fmt.Sprintf("10.214.%d.", pid%250+1), rules: map[int][]string{}}
	sw := "rcs" + nw.tag
	steps := [][]string{
		{"netns", "add", sw},
		{"-n", sw, "link", "add", "br0", "type", "bridge"},
		{"-n", sw, "link", "set", "br0", "up"},
		{"link", "add", "rcx" + nw.tag, "type", "veth", "peer", "name", "up0", "netns", sw},
		{"addr", "add", nw.subnet + "254/24", "dev", "rcx" + nw.tag},
		{"link", "set", "rcx" + nw.tag, "up"},
		{"-n", sw, "link", "set", "up0", "master", "br0"},
		{"-n", sw, "link", "set", "up0", "up"},
	}
	for i := range n {
		h := fmt.Sprintf("rch%s-%d", nw.tag, i+1)
		nw.hosts = append(nw.hosts, h)
		port := fmt.Sprintf("p%d", i+1)
		steps = append(steps,
			[]string{"netns", "add", h},
			[]string{"-n", h, "link", "add", "eth0", "type", "veth", "peer", "name", port, "netns", sw},
			[]string{"-n", h, "addr", "add", nw.addr(i) + "/24", "dev", "eth0"},
			[]string{"-n", h, "link", "set", "eth0", "up"},
			[]string{"-n", h, "link", "set", "lo", "up"},
			[]string{"-n", sw, "link", "set", port, "master", "br0"},
			[]string{"-n", sw, "link", "set", port, "up"})
	}
	for _, s := range steps {
		if err := runCmd("ip", s...); err != nil {
			nw.close()
			return nil, err
		}
	}
	// Random loss needs iptables' statistic match; check it once.
	if err := runCmd("ip", "netns", "exec", nw.hosts[0], "iptables", "-A", "INPUT", "-s", nw.addr(0), "-m", "statistic",
		"--mode", "random", "--probability", "0.5", "-j", "ACCEPT"); err != nil {
		nw.close()
		return nil, fmt.Errorf("iptables in a namespace: %w", err)
	}
	_ = runCmd("ip", "netns", "exec", nw.hosts[0], "iptables", "-F")
	return nw, nil
}

// addr is host i's address.
func (nw *network) addr(i int) string { return fmt.Sprintf("%s%d", nw.subnet, i+1) }

// command wraps an agent command line to run in host i's namespace;
// ip netns exec execs the agent, so the process is the agent itself.
func (nw *network) command(i int, bin string, args []string) (string, []string) {
	return "ip", append([]string{"netns", "exec", nw.hosts[i], bin}, args...)
}

// drop makes host i drop what it receives from host j (and, with out, what
// it sends to j); with prob below 1, each packet with that probability.
func (nw *network) drop(i, j int, out bool, prob float64) error {
	specs := [][]string{{"INPUT", "-s", nw.addr(j)}}
	if out {
		specs = append(specs, []string{"OUTPUT", "-d", nw.addr(j)})
	}
	for _, sp := range specs {
		rule := sp
		if prob < 1 {
			rule = append(rule, "-m", "statistic", "--mode", "random", "--probability", fmt.Sprintf("%.2f", prob))
		}
		rule = append(rule, "-j", "DROP")
		if err := runCmd("ip", append([]string{"netns", "exec", nw.hosts[i], "iptables", "-A"}, rule...)...); err != nil {
			return err
		}
		nw.mu.Lock()
		nw.rules[i] = append(nw.rules[i], strings.Join(rule, " "))
		nw.mu.Unlock()
	}
	return nil
}

// heal removes every rule of host i.
func (nw *network) heal(i int) error {
	nw.mu.Lock()
	delete(nw.rules, i)
	nw.mu.Unlock()
	return runCmd("ip", "netns", "exec", nw.hosts[i], "iptables", "-F")
}

// close deletes every namespace and the harness's veth.
func (nw *network) close() {
	for _, h := range nw.hosts {
		_ = runCmd("ip", "netns", "del", h)
	}
	_ = runCmd("ip", "netns", "del", "rcs"+nw.tag)
	_ = runCmd("ip", "link", "del", "rcx"+nw.tag)
}
