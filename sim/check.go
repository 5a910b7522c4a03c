package sim

import (
	"fmt"
)

// check verifies each replica's own invariants (Replica.CheckInvariants).
// Config.Check runs it after every event.
func (s *Sim) check() error {
	for _, n := range s.nodes {
		if !n.up {
			continue
		}
		if err := n.r.CheckInvariants(); err != nil {
			return fmt.Errorf("%s: %w", n.name, err)
		}
	}
	return nil
}
