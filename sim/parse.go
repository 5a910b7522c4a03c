package sim

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The text forms of a scenario's faults and workload, as `rollcall sim`
// takes them (its flags live in sim/simcli); ParseLatency is in latency.go.

// ParsePartition parses AT[..HEAL]:GROUP|GROUP... . A group is a comma list
// of node indexes and ranges (0-15); "half" splits the nodes in two (nodes
// is read when the scenario is validated, so --nodes may come later).
func ParsePartition(s string, nodes *int) (Partition, error) {
	when, groups, ok := strings.Cut(s, ":")
	if !ok {
		return Partition{}, fmt.Errorf("partition %q: want AT[..HEAL]:GROUP|GROUP", s)
	}
	var p Partition
	at, heal, _ := strings.Cut(when, "..")
	var err error
	if p.At, err = time.ParseDuration(at); err != nil {
		return p, fmt.Errorf("partition %q: %w", s, err)
	}
	if heal != "" {
		if p.Heal, err = time.ParseDuration(heal); err != nil {
			return p, fmt.Errorf("partition %q: %w", s, err)
		}
	}
	if groups == "half" {
		p.Groups = [][]int{{-1}} // resolved in Validate
		p.half = nodes
		return p, nil
	}
	for _, g := range strings.Split(groups, "|") {
		var ids []int
		for _, r := range strings.Split(g, ",") {
			lo, hi, isRange := strings.Cut(strings.TrimSpace(r), "-")
			a, err := strconv.Atoi(lo)
			if err != nil {
				return p, fmt.Errorf("partition %q: bad node %q", s, r)
			}
			b := a
			if isRange {
				if b, err = strconv.Atoi(hi); err != nil || b < a {
					return p, fmt.Errorf("partition %q: bad range %q", s, r)
				}
			}
			for i := a; i <= b; i++ {
				ids = append(ids, i)
			}
		}
		p.Groups = append(p.Groups, ids)
	}
	return p, nil
}

// ParseCrash parses NODE@AT[..RESTART].
func ParseCrash(s string) (Crash, error) {
	node, when, ok := strings.Cut(s, "@")
	if !ok {
		return Crash{}, fmt.Errorf("crash %q: want NODE@AT[..RESTART]", s)
	}
	var c Crash
	var err error
	if c.Node, err = strconv.Atoi(node); err != nil {
		return c, fmt.Errorf("crash %q: bad node: %w", s, err)
	}
	at, restart, _ := strings.Cut(when, "..")
	if c.At, err = time.ParseDuration(at); err != nil {
		return c, fmt.Errorf("crash %q: %w", s, err)
	}
	if restart != "" {
		if c.Restart, err = time.ParseDuration(restart); err != nil {
			return c, fmt.Errorf("crash %q: %w", s, err)
		}
	}
	return c, nil
}

// ParseChurn parses connect=W,status=W,disconnect=W,fail=W (any subset;
// missing weights are zero).
func ParseChurn(s string) (Churn, error) {
	var c Churn
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		w, err := strconv.ParseFloat(v, 64)
		if !ok || err != nil || w < 0 {
			return c, fmt.Errorf("churn %q: want connect=W,status=W,disconnect=W,fail=W with W >= 0", s)
		}
		switch k {
		case "connect":
			c.Connect = w
		case "status":
			c.Status = w
		case "disconnect":
			c.Disconnect = w
		case "fail":
			c.Fail = w
		default:
			return c, fmt.Errorf("churn %q: unknown action %q", s, k)
		}
	}
	return c, nil
}
