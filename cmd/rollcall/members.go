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
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/rollcall/rollcall/gossip"
	"github.com/rollcall/rollcall/internal/tlsconf"
	"github.com/rollcall/rollcall/node"
)

// The operator's cluster commands talk to an agent's HTTP endpoint.

// agentTarget is the agent a cluster command asks, from its flags.
type agentTarget struct {
	addr      string
	tokenFile string
	tls       *tlsconf.ClientFiles
}

func httpFlagSet(name string, stderr io.Writer) (*flag.FlagSet, *agentTarget) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	t := &agentTarget{}
	fs.StringVar(&t.addr, "http-addr", "127.0.0.1:7401", "HTTP address of the agent to ask (its --http-addr)")
	fs.StringVar(&t.tokenFile, "admin-token-file", "", "file holding the agent's admin token (its --admin-token-file)")
	t.tls = clientTLSFlags(fs)
	return fs, t
}

// client builds the HTTP client of the target's flags.
func (t *agentTarget) client() (*agentClient, error) {
	c := &agentClient{addr: t.addr, scheme: "http", http: &http.Client{}}
	if t.tokenFile != "" {
		token, err := node.ReadAdminTokenFile(t.tokenFile)
		if err != nil {
			return nil, fmt.Errorf("--admin-token-file: %w", err)
		}
		c.token = string(token)
	}
	tc, err := t.tls.Config()
	if err != nil {
		return nil, err
	}
	if tc != nil {
		c.scheme = "https"
		c.http.Transport = &http.Transport{TLSClientConfig: tc, Proxy: http.ProxyFromEnvironment}
	}
	return c, nil
}

// agentClient asks one agent's HTTP endpoint.
type agentClient struct {
	addr   string
	scheme string // http or https
	token  string // admin token; empty sends none
	http   *http.Client
}

// call makes one HTTP request to the agent and decodes its JSON answer into
// out; a non-2xx answer becomes an error carrying the agent's message.
func (c *agentClient) call(ctx context.Context, method, path string, body, out any) error {
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
	req, err := http.NewRequestWithContext(ctx, method, c.scheme+"://"+c.addr+path, rd)
	if err != nil {
		return err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("ask agent at %s: %w", c.addr, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("read agent's answer: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		return c.answerError(resp, method, path, raw)
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(raw, out)
}

// answerError turns a non-2xx answer into an error, with a hint for the
// usual mistakes.
func (c *agentClient) answerError(resp *http.Response, method, path string, raw []byte) error {
	hint := ""
	switch {
	case resp.StatusCode == http.StatusUnauthorized && c.token == "":
		hint = "; give --admin-token-file (or ROLLCALL_ADMIN_TOKEN_FILE)"
	case resp.StatusCode == http.StatusBadRequest && bytes.Contains(raw, []byte("HTTPS server")):
		hint = "; the agent speaks TLS: give --tls or --tls-ca"
	}
	var e struct {
		Error  string            `json:"error"`
		Failed map[string]string `json:"failed"`
	}
	if json.Unmarshal(raw, &e) == nil && e.Error != "" {
		if len(e.Failed) > 0 {
			return fmt.Errorf("%s (%s %s): %s; failed on %v%s", resp.Status, method, path, e.Error, e.Failed, hint)
		}
		return fmt.Errorf("%s (%s %s): %s%s", resp.Status, method, path, e.Error, hint)
	}
	return fmt.Errorf("%s (%s %s)%s", resp.Status, method, path, hint)
}

// membersFlagSet is the flag set of `rollcall members`: the agent to ask
// (as for leave and keys) and --json.
func membersFlagSet(stderr io.Writer) (fs *flag.FlagSet, target *agentTarget, asJSON *bool) {
	fs, target = httpFlagSet("members", stderr)
	asJSON = fs.Bool("json", false, "print JSON instead of a table")
	return fs, target, asJSON
}

func runMembers(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, target, asJSON := membersFlagSet(stderr)
	if err := parseFlags(fs, args, os.Environ()); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	agent, err := target.client()
	if err != nil {
		return err
	}
	var members []gossip.Member
	if err := agent.call(ctx, http.MethodGet, "/v1/members", nil, &members); err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(members)
	}
	return writeMembers(stdout, members)
}

// writeMembers prints the members as a table; in a multi-region cluster
// (a member names its region) with REGION and BRIDGE columns: "active"
// for the region's active bridge, "standby" for another bridge-capable
// gateway, "(no WAN)" added for one that reports it sees no other region,
// "-" for a gateway that is not bridge-capable.
func writeMembers(w io.Writer, members []gossip.Member) error {
	regions := slices.ContainsFunc(members, func(m gossip.Member) bool { return m.Region != "" })
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	head := "NAME\tSTATE\tGOSSIP ADDR\tCLIENT ADDR\tINCARNATION\tSESSIONS\tSESSIONS SHOWN"
	if regions {
		head += "\tREGION\tBRIDGE"
	}
	fmt.Fprintln(tw, head)
	for _, m := range members {
		name, shown := m.Name, "online"
		if m.Self {
			name += " (self)"
		}
		if m.LeaseExpired {
			shown = "expired"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s", name, m.State, m.Addr, m.ClientAddr, m.Incarnation, m.Sessions, shown)
		if regions {
			bridge := m.Bridge
			switch {
			case bridge == "":
				bridge = "-"
			case m.NoWAN:
				bridge += " (no WAN)"
			}
			fmt.Fprintf(tw, "\t%s\t%s", m.Region, bridge)
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

func runLeave(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, target := httpFlagSet("leave", stderr)
	if err := parseFlags(fs, args, os.Environ()); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	agent, err := target.client()
	if err != nil {
		return err
	}
	if err := agent.call(ctx, http.MethodPost, "/v1/leave", nil, nil); err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "agent at %s is leaving: its clients are told shutting_down and where to reconnect; sessions not taken over elsewhere go offline everywhere after its --drain-grace\n", target.addr)
	return err
}

func runKeys(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, target := httpFlagSet("keys", stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, `usage: rollcall keys list|generate [flags]
       rollcall keys install|use|remove KEY [flags]
       rollcall keys id KEY

Rotate the gossip encryption key across the whole cluster in three steps,
each of which must succeed on every member before the next:
  rollcall keys install NEW   every member can decrypt with NEW
  rollcall keys use NEW       every member encrypts with NEW
  rollcall keys remove OLD    OLD is no longer accepted
Keys are base64 AES keys of 16, 24 or 32 bytes ('rollcall keys generate').
Agents show keys only by id (the first 8 bytes of the key's SHA-256, hex):
'rollcall keys id KEY' prints a key's id, without asking any agent.
Update the agents' --gossip-key-file / --keyring-file too, for their next
start. list, install, use and remove need the agent's admin token.

`)
		fs.PrintDefaults()
	}
	// The subcommand (and its KEY) come first, then flags.
	var rest []string
	for len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		rest, args = append(rest, args[0]), args[1:]
	}
	if err := parseFlags(fs, args, os.Environ()); err != nil {
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
	case "id":
		if len(rest) != 2 {
			return errors.New("keys id needs exactly one KEY")
		}
		key, err := gossip.ParseKey(rest[1])
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(stdout, gossip.KeyID(key))
		return err
	case "list":
		agent, err := target.client()
		if err != nil {
			return err
		}
		var out keysReply
		if err := agent.call(ctx, http.MethodGet, "/v1/keys", nil, &out); err != nil {
			return err
		}
		if len(out.Keys) == 0 {
			_, err := fmt.Fprintln(stdout, "gossip is not encrypted")
			return err
		}
		printKeyIDs(stdout, out.Keys)
		return nil
	case "install", "use", "remove":
		if len(rest) != 2 {
			return fmt.Errorf("keys %s needs exactly one KEY", op)
		}
		key, err := gossip.ParseKey(rest[1])
		if err != nil {
			return err
		}
		agent, err := target.client()
		if err != nil {
			return err
		}
		var out keysReply
		if err := agent.call(ctx, http.MethodPost, "/v1/keys", keyOpRequest{Op: op, Key: rest[1]}, &out); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "keys %s %s: done on every member; keys now:\n", op, gossip.KeyID(key))
		printKeyIDs(stdout, out.Keys)
		return nil
	default:
		fs.Usage()
		return fmt.Errorf("unknown keys subcommand %q", op)
	}
}

// printKeyIDs prints key ids, one a line, the primary marked.
func printKeyIDs(w io.Writer, keys []gossip.KeyInfo) {
	for _, k := range keys {
		mark := ""
		if k.Primary {
			mark = "  (primary)"
		}
		fmt.Fprintf(w, "%s%s\n", k.ID, mark)
	}
}
