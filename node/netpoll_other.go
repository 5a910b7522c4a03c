//go:build !linux

package node

import (
	"errors"
	"net"
	"syscall"
)

// On systems other than Linux every client connection is served by
// goroutines (conn.readLoop); the event loop (netpoll_linux.go) is Linux
// only.

type pollerSet struct{}

type poller struct{}

func (n *Node) startPollers() (*pollerSet, error) { return nil, nil }

func (s *pollerSet) close() {}

func (s *pollerSet) pollFor(net.Conn) (*poller, syscall.RawConn) { return nil, nil }

func (p *poller) add(*conn) error { panic("node: no event loop on this system") }

func (p *poller) remove(*conn) {}

func (p *poller) setReading(*conn, bool) {}

func (c *conn) shutdownSocket() {}

func writev(int, [][]byte) (int, error) { return 0, errors.ErrUnsupported }
