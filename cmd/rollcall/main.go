// Command rollcall is the Rollcall binary: the gateway agent, its clients and
// tools, and the convergence simulator, as subcommands.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"sort"
)

// command is one subcommand. run gets the arguments after the subcommand name.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

func commands() map[string]command {
	return map[string]command{
		"version": {"print the version", runVersion},
		"bench":   {"generate client load against running gateways and report throughput, latency and server cost", runBench},
		"sim":     {"simulate cluster convergence and failure detection (sim calibrate: check it against a real cluster)", runSim},
		"agent":   {"run a gateway node", runAgent},
		"token":   {"print a client token (a JWT with grants)", runToken},
		"connect": {"an interactive client for a gateway", runConnect},
		"members": {"list the cluster's members, as one agent sees them", runMembers},
		"leave":   {"make an agent leave the cluster gracefully and exit", runLeave},
		"keys":    {"list or rotate the gossip encryption keys", runKeys},
		"health":  {"exit 0 if an agent answers its health check (container HEALTHCHECK)", runHealth},

		"validate-config": {"check a config file as the agent would (--config FILE)", runValidateConfig},
	}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: rollcall <command> [flags]\n\ncommands:")
	cmds := commands()
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-16s %s\n", n, cmds[n].summary)
	}
	fmt.Fprintln(w, "\nrun 'rollcall <command> --help' for a command's flags; 'rollcall --version' for the version")
}

func main() {
	if len(os.Args) < 2 || os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help" {
		usage(os.Stderr)
		if len(os.Args) < 2 {
			os.Exit(2)
		}
		return
	}
	if os.Args[1] == "--version" || os.Args[1] == "-version" {
		os.Args[1] = "version"
	}
	cmd, ok := commands()[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "rollcall: unknown command %q\n\n", os.Args[1])
		usage(os.Stderr)
		os.Exit(2)
	}
	// SIGINT/SIGTERM end ctx (the agent drains); a second one exits at
	// once; SIGHUP reloads the agent.
	sig := newSignalHandler(os.Stderr, os.Exit)
	ctx, stop := sig.notify(context.Background())
	err := cmd.run(withSignalHandler(ctx, sig), os.Args[2:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "rollcall %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}
