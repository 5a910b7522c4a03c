package node

import (
	"net"
	"os"
	"time"

	"go.uber.org/zap"

	"github.com/rollcall/rollcall/protocol"
)

// File descriptors. Every client connection holds one, and so does
// everything else the process opens: the listeners, gossip's sockets, HTTP
// requests and their streams (/v1/events, the status page's), WebSockets
// before they are admitted, token key files on reload. A gateway allowed
// more connections than the process may open files would find out from
// accept(2) failing with EMFILE, where no client can be told anything. So
// the node caps MaxConnections below the open-file limit (RLIMIT_NOFILE),
// keeping FileReserve descriptors for the rest, and when accept fails for
// want of descriptors all the same it still answers the client overloaded
// (spareFD).

// Open-file reserve: the descriptors MaxConnections may never take.
const (
	// MinFileReserve is the fewest descriptors kept for the process's
	// own files, whatever the limit: the listeners, gossip, a few HTTP
	// requests and the spare of spareFD.
	MinFileReserve = 64
	// FileReservePercent is the share of the open-file limit kept, if more
	// than MinFileReserve: 1,000 of 20,000, 3,276 of 65,536.
	FileReservePercent = 5
)

// FileReserve returns the descriptors kept out of MaxConnections's reach
// under an open-file limit of limit: max(MinFileReserve,
// limit*FileReservePercent/100).
func FileReserve(limit int) int {
	return max(MinFileReserve, limit*FileReservePercent/100)
}

// ConnectionsForFileLimit returns the most client connections a process
// allowed limit open files holds: limit less FileReserve(limit), at least
// 1. It returns -1 (no cap) for a limit of 0 or less (unknown or
// unlimited).
func ConnectionsForFileLimit(limit int) int {
	if limit <= 0 {
		return -1
	}
	return max(limit-FileReserve(limit), 1)
}

// fileLimit returns the open-file limit the node keeps its connections
// under (Config.FileLimit, or the process's soft RLIMIT_NOFILE when that
// is zero), or 0 for none.
func (c *Config) fileLimit() int {
	switch {
	case c.FileLimit > 0:
		return c.FileLimit
	case c.FileLimit < 0:
		return 0
	}
	soft, err := processFileLimit()
	if err != nil || soft <= 0 {
		return 0
	}
	return soft
}

// capMaxConnections returns the connection cap the node enforces for a
// configured MaxConnections of max (negative: none): max, or less when the
// open-file limit holds fewer.
func (n *Node) capMaxConnections(max int) int {
	if c := n.fileConns; c > 0 && (max < 0 || max > c) {
		return c
	}
	return max
}

// FileLimit returns the open-file limit the node keeps its connections
// under (0: none known), and the connection cap it allows:
// ConnectionsForFileLimit(limit).
func (n *Node) FileLimit() (limit, maxConnections int) {
	return n.files, n.fileConns
}

// MaxConnections returns the cap on client connections the node enforces
// now: Limits().MaxConnections, or less when the open-file limit holds
// fewer (FileLimit); negative means no cap.
func (n *Node) MaxConnections() int {
	return n.capMaxConnections(n.limits.Load().MaxConnections)
}

// spareFD is one descriptor (of os.DevNull) an accept loop holds in
// reserve. When accept fails because the process (EMFILE) or the system
// (ENFILE) is out of descriptors, the connection stays in the listen
// backlog, and its client would wait there with no answer while the loop
// retried. Closing the spare frees one descriptor: enough to accept that
// connection, tell it overloaded and close it; the spare is then reopened
// for the next one.
type spareFD struct {
	f       *os.File
	refused int       // connections refused since the last log line
	logged  time.Time // when the last log line was written
}

// openSpareFD opens the spare; without one (already out of descriptors),
// take tries again later.
func openSpareFD() *spareFD {
	s := &spareFD{}
	s.reopen()
	return s
}

func (s *spareFD) reopen() {
	if s.f != nil {
		return
	}
	if f, err := os.Open(os.DevNull); err == nil {
		s.f = f
	}
}

func (s *spareFD) close() {
	if s.f != nil {
		s.f.Close()
		s.f = nil
	}
}

// refuseWithoutFDs handles an accept error err of ln: when it is EMFILE or
// ENFILE and the spare is held, it frees the spare, accepts one connection,
// answers it overloaded (on plain TCP; a TLS client is closed before its
// handshake), closes it and takes the spare again. It reports whether it
// accepted one; otherwise the caller backs off as for any accept error.
func (n *Node) refuseWithoutFDs(ln net.Listener, s *spareFD, err error) bool {
	if !isFDExhausted(err) {
		return false
	}
	if s.f == nil {
		s.reopen() // a descriptor may have been freed since
		return false
	}
	s.close()
	// The connection's descriptor is the spare's, back after the close.
	defer s.reopen()
	nc, aerr := ln.Accept()
	if aerr != nil {
		return false
	}
	n.stats.accepted.Add(1)
	n.stats.overloaded.Add(1)
	n.stats.outOfFiles.Add(1)
	n.refuse(nc, n.tls == nil, protocol.CodeOverloaded, "the gateway is out of file descriptors; try another gateway")
	s.refused++
	if now := time.Now(); now.Sub(s.logged) >= time.Second {
		limit, _ := n.FileLimit()
		n.log.Warn("out of file descriptors: refusing clients overloaded; lower --max-connections or raise the open-file limit",
			zap.Int("refused", s.refused), zap.Int("file_limit", limit), zap.Int("max_connections", n.MaxConnections()),
			zap.Error(err))
		s.refused, s.logged = 0, now
	}
	return true
}
