package sim

import (
	"fmt"
)

// check verifies the simulator's shadows of real state against the real
// code: each node's watermark index against Replica.Digest, and each
// replica's own invariants. Config.Check runs it after every event.
func (s *Sim) check() error {
	for _, n := range s.nodes {
		if !n.up {
			continue
		}
		if err := n.r.CheckInvariants(); err != nil {
			return fmt.Errorf("%s: %w", n.name, err)
		}
		for _, e := range n.r.Digest() {
			if e.Origin == n.self {
				continue
			}
			if got := n.wm.get(e.Origin); got != e.Watermark {
				return fmt.Errorf("%s: watermark index says %s at %d, replica %d", n.name, e.Origin, got, e.Watermark)
			}
		}
	}
	return nil
}
