//go:build !linux

package node

import (
	"net"
)

// On systems other than Linux every client connection is served by
// goroutines (conn.readLoop, conn.writeLoop); the event loop
// (netpoll_linux.go) is Linux only, and these are never called.

type pollerSet struct{}

type poller struct{}

func (n *Node) startPollers() (*pollerSet, error) { return nil, nil }

func (s *pollerSet) close() {}

func (s *pollerSet) pollFor(net.Conn) (*poller, int, bool) { return nil, -1, false }

func (p *poller) add(*conn) error { panic("node: no event loop on this system") }

func (p *poller) setReading(*conn, bool) {}

func (c *conn) pause(<-chan struct{}) {}

func (c *conn) finishEvent() {}

func (c *conn) shutdownEvent() {}

func (c *conn) writeSoonEvent() {}

func (c *conn) flushEvent(bool) {}

func (c *conn) flushCorked() bool { return false }

func (c *conn) closeEvent([][]byte) {}
