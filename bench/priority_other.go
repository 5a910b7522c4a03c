//go:build !linux

package bench

// raisePriority is not supported here: the probe runs at normal priority.
func raisePriority() string { return "normal" }
