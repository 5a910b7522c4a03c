package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/rollcall/rollcall/gossip"
)

// The operator's cluster commands talk to an agent's HTTP endpoint.

func httpFlagSet(name string, stderr io.Writer) (*flag.FlagSet, *string) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("http-addr", "127.0.0.1:7401", "HTTP address of the agent to ask (its --http-addr)")
	return fs, addr
}

// callAgent makes one HTTP request to an agent and decodes its JSON answer
// into out; a non-2xx answer becomes an error carrying the agent's message.
func callAgent(ctx context.Context, method, addr, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, "http://"+addr+path, rd)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("ask agent at %s: %w", addr, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("read agent's answer: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		var e struct {
			Error  string            `json:"error"`
			Failed map[string]string `json:"failed"`
		}
		if json.Unmarshal(raw, &e) == nil && e.Error != "" {
			if len(e.Failed) > 0 {
				return fmt.Errorf("%s (%s %s): %s; failed on %v", resp.Status, method, path, e.Error, e.Failed)
			}
			return fmt.Errorf("%s (%s %s): %s", resp.Status, method, path, e.Error)
		}
		return fmt.Errorf("%s (%s %s)", resp.Status, method, path)
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(raw, out)
}

func runMembers(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, addr := httpFlagSet("members", stderr)
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	if err := parseFlags(fs, args, os.Getenv); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	var members []gossip.Member
	if err := callAgent(ctx, http.MethodGet, *addr, "/v1/members", nil, &members); err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(members)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSTATE\tGOSSIP ADDR\tCLIENT ADDR\tINCARNATION\tSESSIONS\tSESSIONS SHOWN")
	for _, m := range members {
		name, shown := m.Name, "online"
		if m.Self {
			name += " (self)"
		}
		if m.LeaseExpired {
			shown = "expired"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\n", name, m.State, m.Addr, m.ClientAddr, m.Incarnation, m.Sessions, shown)
	}
	return tw.Flush()
}

func runLeave(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, addr := httpFlagSet("leave", stderr)
	if err := parseFlags(fs, args, os.Getenv); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if err := callAgent(ctx, http.MethodPost, *addr, "/v1/leave", nil, nil); err != nil {
		return err
	}
	_, err := fmt.Fprintf(stdout, "agent at %s is leaving: its clients are told shutting_down and where to reconnect; sessions not taken over elsewhere go offline everywhere after its --drain-grace\n", *addr)
	return err
}

func runKeys(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, addr := httpFlagSet("keys", stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, `usage: rollcall keys list|generate [--http-addr A]
       rollcall keys install|use|remove KEY [--http-addr A]

Rotate the gossip encryption key across the whole cluster in three steps,
each of which must succeed on every member before the next:
  rollcall keys install NEW   every member can decrypt with NEW
  rollcall keys use NEW       every member encrypts with NEW
  rollcall keys remove OLD    OLD is no longer accepted
Keys are base64 AES keys of 16, 24 or 32 bytes ('rollcall keys generate').
Update the agents' --gossip-key / --keyring-file too, for their next start.

`)
		fs.PrintDefaults()
	}
	// The subcommand (and its KEY) come first, then flags.
	var rest []string
	for len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		rest, args = append(rest, args[0]), args[1:]
	}
	if err := parseFlags(fs, args, os.Getenv); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if len(rest) == 0 {
		fs.Usage()
		return errors.New("missing a keys subcommand")
	}
	switch op := rest[0]; op {
	case "generate":
		k := make([]byte, 32)
		if _, err := rand.Read(k); err != nil {
			return err
		}
		_, err := fmt.Fprintln(stdout, base64.StdEncoding.EncodeToString(k))
		return err
	case "list":
		var out struct {
			Keys []string `json:"keys"`
		}
		if err := callAgent(ctx, http.MethodGet, *addr, "/v1/keys", nil, &out); err != nil {
			return err
		}
		if len(out.Keys) == 0 {
			_, err := fmt.Fprintln(stdout, "gossip is not encrypted")
			return err
		}
		for i, k := range out.Keys {
			mark := ""
			if i == 0 {
				mark = "  (primary)"
			}
			fmt.Fprintf(stdout, "%s%s\n", k, mark)
		}
		return nil
	case "install", "use", "remove":
		if len(rest) != 2 {
			return fmt.Errorf("keys %s needs exactly one KEY", op)
		}
		if _, err := gossip.ParseKey(rest[1]); err != nil {
			return err
		}
		if err := callAgent(ctx, http.MethodPost, *addr, "/v1/keys", keyOpRequest{Op: op, Key: rest[1]}, nil); err != nil {
			return err
		}
		_, err := fmt.Fprintf(stdout, "keys %s: done on every member\n", op)
		return err
	default:
		fs.Usage()
		return fmt.Errorf("unknown keys subcommand %q", op)
	}
}
