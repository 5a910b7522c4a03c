// Command scale measures how real Rollcall gossip nodes (gossip.New over a
// gossip.ReplicaHost: memberlist on loopback) move a large replica: a late
// joiner, a restart of one node under the same name, and a node lagging
// after a partition while writes go on (`make scale`):
//
//	scale [-sessions 1000000] [-nodes 3] [-timeout 120s] [-scenarios joiner,restart,partition]
//
// Every node is a process of its own (this binary re-executed with -role
// node), so each node's memory is its own. For each scenario it prints the
// time to ready, the records the node holds against the senders', the sync
// records, bytes and pages transferred, the senders' peak extra live heap
// and the node's live heap per remote session, then one verdict per
// target. It exits 0 whatever the verdicts (it is a measurement), 1 on a
// harness error.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	args := os.Args[1:]
	if len(args) >= 2 && args[0] == "-role" && args[1] == "node" {
		if err := runNode(args[2:], os.Stdin, os.Stdout, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, "scale:", err)
			os.Exit(1)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, args, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		os.Exit(1)
	}
}
