package node

import "sync"

// held is a mutex taken by lockOf, for a section that must not leave the
// mutex held if a panic unwinds it (panics.go): defer unlock at once, and
// call it too where the section ends early (a hand-off from n.mu to fanMu,
// say); the deferred call then does nothing.
//
//	h := lockOf(&n.mu)
//	defer h.unlock()
//	...
//	h.unlock()
type held struct {
	mu *sync.Mutex
	on bool
}

// lockOf locks mu and returns it held.
func lockOf(mu *sync.Mutex) held {
	mu.Lock()
	return held{mu: mu, on: true}
}

// unlock unlocks the mutex if it is still held.
func (h *held) unlock() {
	if h.on {
		h.on = false
		h.mu.Unlock()
	}
}
