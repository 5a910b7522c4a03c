package dissem

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rollcall/rollcall/crdt"
	"github.com/rollcall/rollcall/internal/datadriven"
)

// TestScripts runs the scripts of testdata/dissem/core/ (from the module root): a few cores over the test
// harness, every output they ask for printed. Directives:
//
//	nodes n0 n1 n2 [eager-threshold=N] [lease=D] [alive=D] [page=N] [relay=R]
//	                    page: records per page of an anti-entropy answer
//	publish n0 user=u [device=d] [status=away] [state=disconnected]
//	                    a write: sent at once (its Ready printed), or pending
//	                    until the open write window ends
//	tick [D]            advance time by D (default 1ms) and tick every node
//	leave n0            the node leaves (Node.Leave)
//	restart n0 inc=K    a new incarnation of n0 (empty replica) joins every
//	                    member; what was in flight to or from it is lost
//	deliver [from=X] [to=Y] [type=T] [n=K]   deliver matching messages in flight
//	drop [from=X] [to=Y] [type=T] [n=K]      lose them
//	gossip              one round: every piggyback queue to every member
//	push-pull n0 n1     memberlist's push/pull: each gets the other's
//	                    digest (state) to answer
//	member-failed n1 at=n0 [left]            memberlist's verdict at n0
//	member-alive n1 at=n0 [inc=K]            memberlist's join or update
//	members n0 N        memberlist's member count at n0
//	stabilize           deliver until nothing is in flight
//	flight              list the messages in flight
//	converged           whether every replica holds the same records
//	show n0 user=u      the session as n0 shows it
//
// Run with -rewrite to regenerate the expected outputs, then review them.
func TestScripts(t *testing.T) {
	paths, err := filepath.Glob("../testdata/dissem/core/*.txt")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no scripts in ../testdata/dissem/core: %v", err)
	}
	for _, path := range paths {
		t.Run(filepath.Base(path), func(t *testing.T) {
			var h *harness
			datadriven.Run(t, path, func(t *testing.T, c *datadriven.Cmd) string {
				if c.Name != "nodes" && h == nil {
					t.Fatalf("%s: %s before nodes", c.Pos, c.Name)
				}
				out, err := runCmd(&h, c)
				if err != nil {
					return "error: " + err.Error()
				}
				return out
			})
		})
	}
}

func runCmd(hp **harness, c *datadriven.Cmd) (string, error) {
	h := *hp
	if h != nil {
		h.out.Reset()
	}
	pos := c.Positional()
	dur := func(key string, def time.Duration) (time.Duration, error) {
		v, ok := c.Arg(key)
		if !ok {
			return def, nil
		}
		return time.ParseDuration(v)
	}
	switch c.Name {
	case "nodes":
		thr := 64
		if v, ok := c.Arg("eager-threshold"); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				return "", err
			}
			thr = n
		}
		lease, err := dur("lease", 3*time.Second)
		if err != nil {
			return "", err
		}
		alive, err := dur("alive", time.Second)
		if err != nil {
			return "", err
		}
		relay := RelayTree
		if v, ok := c.Arg("relay"); ok {
			if relay, err = ParseRelay(v); err != nil {
				return "", err
			}
		}
		nh, err := newHarness(pos, func(cfg *Config) {
			cfg.EagerThreshold, cfg.LeaseTimeout, cfg.AliveInterval = thr, lease, alive
			cfg.Relay = relay
		})
		if err != nil {
			return "", err
		}
		if v, ok := c.Arg("page"); ok {
			if nh.pageRecords, err = strconv.Atoi(v); err != nil {
				return "", err
			}
		}
		*hp = nh
		return nh.out.String(), nil
	case "publish":
		n, err := h.node(pos)
		if err != nil {
			return "", err
		}
		user, _ := c.Arg("user")
		device, ok := c.Arg("device")
		if !ok {
			device = "d"
		}
		status := crdt.StatusAvailable
		if v, ok := c.Arg("status"); ok {
			if status, err = crdt.ParseStatus(v); err != nil {
				return "", err
			}
		}
		state := crdt.StateActive
		if v, _ := c.Arg("state"); v == "disconnected" {
			state = crdt.StateDisconnected
		}
		if err := h.write(n, user, device, status, state); err != nil {
			return "", err
		}
		h.drive(n, "publish") // a write outside a window goes out at once
		if n.core.flushAt == 0 {
			fmt.Fprintf(&h.out, "%s pending %d\n", n.name, n.core.Pending())
		} else {
			fmt.Fprintf(&h.out, "%s pending %d, flush at +%v\n", n.name, n.core.Pending(),
				time.Duration(n.core.flushAt-h.now))
		}
		return h.out.String(), nil
	case "tick":
		d := time.Millisecond
		if len(pos) > 0 {
			var err error
			if d, err = time.ParseDuration(pos[0]); err != nil {
				return "", err
			}
		}
		h.advance(d)
	case "leave":
		n, err := h.node(pos)
		if err != nil {
			return "", err
		}
		n.core.Leave()
		h.drive(n, "leave")
	case "restart":
		if len(pos) == 0 {
			return "", fmt.Errorf("restart NODE inc=K")
		}
		v, ok := c.Arg("inc")
		if !ok {
			return "", fmt.Errorf("restart NODE inc=K")
		}
		k, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return "", err
		}
		if err := h.restart(pos[0], uint64(harnessEpoch)+k); err != nil {
			return "", err
		}
	case "deliver", "drop":
		idx, err := h.match(c)
		if err != nil {
			return "", err
		}
		// Deliver in order; indices shift as messages leave.
		picked := make([]flight, len(idx))
		for i, j := range idx {
			picked[i] = h.flight[j]
		}
		for _, f := range picked {
			k := h.find(f)
			if c.Name == "drop" {
				fmt.Fprintf(&h.out, "dropped %s -> %s %s\n", f.from, f.to, Describe(f.msg))
				h.drop(k)
			} else {
				h.deliver(k)
			}
		}
	case "gossip":
		h.gossip()
		return h.flightList(), nil
	case "push-pull":
		if len(pos) != 2 || h.nodes[pos[0]] == nil || h.nodes[pos[1]] == nil || pos[0] == pos[1] {
			return "", fmt.Errorf("push-pull NODE NODE")
		}
		h.pushPull(pos[0], pos[1])
		return h.flightList(), nil
	case "member-failed", "member-alive":
		at, ok := c.Arg("at")
		if !ok || len(pos) == 0 {
			return "", fmt.Errorf("%s NODE at=NODE", c.Name)
		}
		n := h.nodes[at]
		if n == nil {
			return "", fmt.Errorf("no node %q", at)
		}
		if c.Name == "member-failed" {
			n.core.MemberFailed(pos[0], slicesContains(pos, "left"), h.now)
		} else {
			var inc uint64
			if v, ok := c.Arg("inc"); ok {
				k, err := strconv.ParseUint(v, 10, 64)
				if err != nil {
					return "", err
				}
				inc = uint64(harnessEpoch) + k
			}
			n.core.MemberAlive(pos[0], Meta{Incarnation: inc}, h.now)
		}
		h.drive(n, c.Name)
	case "members":
		n, err := h.node(pos)
		if err != nil || len(pos) != 2 {
			return "", fmt.Errorf("members NODE COUNT")
		}
		k, err := strconv.Atoi(pos[1])
		if err != nil {
			return "", err
		}
		n.members = k
		return fmt.Sprintf("%s mode %s", n.name, n.core.Mode()), nil
	case "stabilize":
		h.stabilize()
	case "flight":
		return h.flightList(), nil
	case "converged":
		if err := h.converged(); err != nil {
			return "no: " + err.Error(), nil
		}
		return "yes", nil
	case "show":
		n, err := h.node(pos)
		if err != nil {
			return "", err
		}
		user, _ := c.Arg("user")
		p := n.r.Presence(user, 0)
		var sess []string
		for _, s := range p.Sessions {
			sess = append(sess, fmt.Sprintf("%s/%s@%s", s.Device, s.Status, s.Gateway))
		}
		return fmt.Sprintf("%s online=%v status=%s sessions=[%s]", user, p.Online, p.Status, strings.Join(sess, " ")), nil
	default:
		return "", fmt.Errorf("unknown directive %q", c.Name)
	}
	return h.out.String(), nil
}

func slicesContains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func (h *harness) node(pos []string) (*hnode, error) {
	if len(pos) == 0 {
		return nil, fmt.Errorf("which node?")
	}
	n := h.nodes[pos[0]]
	if n == nil {
		return nil, fmt.Errorf("no node %q", pos[0])
	}
	return n, nil
}

// match returns the indices of the messages in flight a deliver or drop
// selects, in flight order.
func (h *harness) match(c *datadriven.Cmd) ([]int, error) {
	from, _ := c.Arg("from")
	to, _ := c.Arg("to")
	typ, _ := c.Arg("type")
	limit := -1
	if v, ok := c.Arg("n"); ok {
		k, err := strconv.Atoi(v)
		if err != nil {
			return nil, err
		}
		limit = k
	}
	var out []int
	for i, f := range h.flight {
		if (from != "" && f.from != from) || (to != "" && f.to != to) || (typ != "" && f.msg.Type.String() != typ) {
			continue
		}
		if limit >= 0 && len(out) == limit {
			break
		}
		out = append(out, i)
	}
	return out, nil
}

// find returns the index of f in flight (by identity of its message and
// ends), as deliveries shift the indices.
func (h *harness) find(f flight) int {
	for i, g := range h.flight {
		if g.msg == f.msg && g.from == f.from && g.to == f.to {
			return i
		}
	}
	panic("flight vanished")
}

func (h *harness) flightList() string {
	if len(h.flight) == 0 {
		return "nothing in flight"
	}
	var b strings.Builder
	for _, f := range h.flight {
		kind := "packet"
		if f.reliable {
			kind = "stream"
		}
		fmt.Fprintf(&b, "%s %s -> %s %s\n", kind, f.from, f.to, Describe(f.msg))
	}
	return b.String()
}
