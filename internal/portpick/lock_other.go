//go:build !unix

package portpick

import "os"

// tryLock has no cross-process lock here: the port range alone keeps the
// kernel's own choices away.
func tryLock(path string) (*os.File, error) { return nil, nil }

func unlock(f *os.File) {}
