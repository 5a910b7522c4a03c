//go:build unix

package portpick

import (
	"os"
	"syscall"
)

// tryLock takes an exclusive advisory lock on path without waiting. The
// lock ends with the file's close, or with the process.
func tryLock(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func unlock(f *os.File) { f.Close() }
