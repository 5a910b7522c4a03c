//go:build !linux

package main

import (
	"io"
	"os"
)

// isTerminal reports whether w is a character device, the closest check
// without a terminal ioctl: only a terminal gets colour codes and progress
// bars.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
