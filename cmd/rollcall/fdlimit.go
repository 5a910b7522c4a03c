package main

import (
	"fmt"

	"go.uber.org/zap"

	"github.com/rollcall/rollcall/node"
)

// File descriptors (docs/operations/configuration.md, "File descriptors").
// Each client connection holds one; the node caps --max-connections below
// the process's open-file limit (node.ConnectionsForFileLimit), and the agent
// raises that limit as far as it may first and says what it got.

// openFileLimit raises the soft RLIMIT_NOFILE to the hard limit (raiseFileLimit)
// and returns the limit to give node.Config.FileLimit: the soft limit after
// the raise, or 0 (the node reads it itself) when it cannot be read.
func openFileLimit(log *zap.Logger) int {
	soft, hard, err := raiseFileLimit()
	if err != nil {
		log.Warn("could not read or raise the open-file limit (RLIMIT_NOFILE)", zap.Error(err))
		return 0
	}
	if soft < 0 {
		log.Info("open-file limit: unlimited")
		return -1
	}
	log.Info("open-file limit", zap.Int("soft", soft), zap.Int("hard", hard),
		zap.Int("reserve", node.FileReserve(soft)), zap.Int("connections", node.ConnectionsForFileLimit(soft)))
	return soft
}

// connectionCap describes the cap n enforces on client connections when
// it is below the configured --max-connections (want), because of the
// open-file limit; "" when it is not.
func connectionCap(n *node.Node, want int) string {
	limit, fileConns := n.FileLimit()
	if fileConns < 0 || (want > 0 && want <= fileConns) {
		return ""
	}
	asked := fmt.Sprint(want)
	if want < 0 {
		asked = "no cap (negative)"
	}
	return fmt.Sprintf("--max-connections %s is more than the open-file limit (%d) allows: at most %d connections, "+
		"keeping %d descriptors for listeners, gossip, HTTP and files; raise the hard limit (ulimit -Hn, systemd LimitNOFILE=, docker --ulimit nofile=) to hold more",
		asked, limit, fileConns, node.FileReserve(limit))
}

// logConnectionCap logs the connection cap n enforces, with a warning when
// the open-file limit holds it below --max-connections (want).
func logConnectionCap(log *zap.Logger, n *node.Node, want int) {
	limit, _ := n.FileLimit()
	if msg := connectionCap(n, want); msg != "" {
		log.Warn(msg, zap.Int("max_connections", n.MaxConnections()), zap.Int("file_limit", limit), zap.Int("max_connections_flag", want))
		return
	}
	log.Info("connection cap", zap.Int("max_connections", n.MaxConnections()), zap.Int("file_limit", limit))
}
