//go:build !unix

package node

// processFileLimit: no RLIMIT_NOFILE here; the node does not cap
// MaxConnections by it.
func processFileLimit() (int, error) { return 0, nil }

// isFDExhausted: accept's errors are not told apart here.
func isFDExhausted(error) bool { return false }
