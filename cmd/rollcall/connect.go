package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rollcall/rollcall/client"
	"github.com/rollcall/rollcall/internal/tlsconf"
	"github.com/rollcall/rollcall/node"
	"github.com/rollcall/rollcall/protocol"
)

const connectHelp = `commands:
  status available|away|busy      set this device's status
  account none|away|dnd|busy|invisible
                                  set the account override (invisible: others
                                  see you offline)
  account auth DEVICE             make DEVICE authoritative ("account auth -" clears)
  account text TEXT...            set the status text ("account text -" clears)
  account emoji EMOJI             set the status emoji ("account emoji -" clears)
  account until TIME|DURATION     lapse override, text and emoji at an RFC 3339
                                  time or after a duration ("account until -" clears)
  meta JSON                       set this session's meta (a JSON object; {} clears)
  get USER...                     presence of users
  group GROUP                     online members of a group
  locate USER                     a user's active sessions
  sub USER...  |  sub group G     subscribe (events print as they come)
  unsub USER... | unsub group G   unsubscribe
  join G  |  leave G              join or leave a group
  send USER TEXT...               message every session of USER (TEXT may be JSON)
  refresh TOKEN                   present a new token before the current one expires
  hb                              heartbeat now (automatic anyway)
  bye                             end the session and exit
  help                            this text
  {...}                           a raw JSON request line`

// runConnect is `rollcall connect`: an interactive client on stdin/stdout.
func runConnect(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return connectClient(ctx, args, os.Stdin, stdout, stderr)
}

// connectFlags are the flags of `rollcall connect`.
type connectFlags struct {
	addr, user, device, token, status, groups *string
	raw                                       *bool
	tls                                       *tlsconf.ClientFiles
}

func connectFlagSet(stderr io.Writer) (*flag.FlagSet, connectFlags) {
	fs := flag.NewFlagSet("connect", flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs, connectFlags{
		addr:   fs.String("addr", node.DefaultClientAddr, "gateway client address, or comma-separated addresses to fail over between; ws:// and wss:// URLs of a gateway's /ws go over WebSocket"),
		user:   fs.String("user", "", "user to connect as"),
		device: fs.String("device", "", "device name (default: the gateway assigns one)"),
		token:  fs.String("token", "", "client token (see 'rollcall token'); not needed by a --dev gateway"),
		status: fs.String("status", "", "initial status: available, away or busy"),
		groups: fs.String("groups", "", "comma-separated groups to join"),
		raw:    fs.Bool("json", false, "print the gateway's lines as raw JSON"),
		tls:    clientTLSFlags(fs),
	}
}

// connectClient runs the interactive client with explicit streams. The
// session is the client library's (client.RawClient): it says hello,
// heartbeats, and reconnects and fails over between the --addr gateways;
// this prints the lines the gateway sends and sends the requests typed.
func connectClient(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs, cf := connectFlagSet(stderr)
	if err := parseFlags(fs, args, os.Environ()); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if *cf.user == "" {
		return errors.New("need --user")
	}
	addrs := splitList(*cf.addr)
	if len(addrs) == 0 {
		return errors.New("need --addr")
	}
	tlsConfig, err := cf.tls.Config()
	if err != nil {
		return err
	}
	cl := &interactive{out: stdout, raw: *cf.raw, token: *cf.token}
	r, err := client.DialRaw(ctx, client.Config{
		Addrs: addrs, TLS: tlsConfig, Token: cl.currentToken,
		User: *cf.user, Device: *cf.device, Status: *cf.status, Groups: splitList(*cf.groups),
		// Give up at once when no gateway takes the first hello; once
		// welcomed, the session reconnects until it ends.
		DialAttempts: len(addrs),
	})
	if err != nil {
		return connectError(err, tlsConfig != nil)
	}
	cl.r = r
	printed := make(chan struct{})
	go func() {
		defer close(printed)
		for l := range r.Lines() {
			cl.show(ctx, l)
		}
		cl.printf("-- connection closed")
	}()
	// end waits for the last line to be printed and returns the exit error:
	// why the session ended, when the gateway ended it.
	end := func(closeErr error) error {
		<-printed
		if err := r.Err(); err != nil {
			return exitError(err)
		}
		return closeErr
	}

	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdin)
		sc.Buffer(make([]byte, 64<<10), 64<<10)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-r.Done():
				return
			}
		}
	}()
	for {
		select {
		case <-r.Done():
			return end(nil)
		case <-ctx.Done():
			return end(r.Close())
		case line, ok := <-lines:
			if !ok {
				return end(r.Close())
			}
			req, quit, err := parseCommand(line)
			switch {
			case err != nil:
				cl.printf("? %v (try 'help')", err)
			case quit:
				return end(r.Close())
			case req == nil && strings.TrimSpace(line) == "help":
				cl.printf("%s", connectHelp)
			case req != nil:
				if _, ok := r.Session(); !ok {
					cl.printf("? not sent: reconnecting")
					continue
				}
				cl.note(req)
				if err := r.Send(ctx, req); err != nil && !errors.Is(err, client.ErrClosed) && ctx.Err() == nil {
					cl.printf("? not sent: %v", err)
				}
			}
		}
	}
}

// connectError explains a first connect that failed.
func connectError(err error, tls bool) error {
	var e *client.Error
	if errors.As(err, &e) {
		return exitError(e)
	}
	if !tls && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)) {
		return fmt.Errorf("%w (if it serves TLS, give --tls or --tls-ca)", err)
	}
	return err
}

// exitError is the exit error of a session the gateway ended or refused.
func exitError(err error) error {
	var e *client.Error
	if errors.As(err, &e) {
		return fmt.Errorf("gateway closed the session: %s: %s", e.Code, e.Message)
	}
	return err
}

// interactive is the state of one `rollcall connect` session.
type interactive struct {
	r   *client.RawClient
	raw bool // --json

	omu sync.Mutex // serialises writes to out
	out io.Writer

	mu      sync.Mutex
	token   string   // for the next hello: --token, or the last refresh sent
	restore [][]byte // the distinct state-changing requests sent, oldest first
	lost    bool     // a connection was lost; the next welcome is a reconnect's
}

func (cl *interactive) printf(format string, args ...any) {
	cl.omu.Lock()
	defer cl.omu.Unlock()
	fmt.Fprintf(cl.out, format+"\n", args...)
}

func (cl *interactive) currentToken(context.Context) (string, error) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return cl.token, nil
}

// restoredOps are the requests whose effect a reconnect loses: connect
// sends them again, in order, after the new welcome.
var restoredOps = map[string]bool{protocol.OpStatus: true, protocol.OpAccount: true, protocol.OpJoin: true,
	protocol.OpLeave: true, protocol.OpSub: true, protocol.OpUnsub: true, protocol.OpMeta: true}

// note remembers a request line about to be sent: a refresh's token for
// the next hello, a state change to send again after a reconnect.
func (cl *interactive) note(req []byte) {
	var r protocol.Request
	if json.Unmarshal(req, &r) != nil {
		return
	}
	cl.mu.Lock()
	defer cl.mu.Unlock()
	switch {
	case r.Op == protocol.OpRefresh && r.Token != "":
		cl.token = r.Token
	case restoredOps[r.Op]:
		cl.restore = slices.DeleteFunc(cl.restore, func(b []byte) bool { return bytes.Equal(b, req) })
		cl.restore = append(cl.restore, slices.Clone(req))
	}
}

// show prints one item of the session's lines.
func (cl *interactive) show(ctx context.Context, l client.RawLine) {
	if l.Data == nil {
		var e *client.Error
		if errors.As(l.Lost, &e) {
			cl.printf("-- connection lost; reconnecting") // the error line said why
		} else {
			cl.printf("-- connection lost (%v); reconnecting", l.Lost)
		}
		cl.mu.Lock()
		cl.lost = true
		cl.mu.Unlock()
		return
	}
	line := bytes.TrimSpace(l.Data)
	m, err := decodeReply(line)
	switch {
	case err != nil, cl.raw:
		cl.printf("%s", line)
	default:
		cl.printf("%s", formatReply(m))
	}
	if _, ok := m.(*protocol.Welcome); ok {
		cl.mu.Lock()
		again := cl.lost
		cl.lost = false
		reqs := slices.Clone(cl.restore)
		cl.mu.Unlock()
		if again && len(reqs) > 0 {
			cl.printf("-- sending again the %d request(s) that changed status, groups or subscriptions", len(reqs))
			go func() {
				for _, req := range reqs {
					if cl.r.Send(ctx, req) != nil {
						return
					}
				}
			}()
		}
	}
}

// decodeReply decodes a line from the gateway into node's type for its op:
// *protocol.Welcome, *okReply, *protocol.HBReply, *protocol.PresenceReply,
// *protocol.GroupReply, *protocol.LocateReply, *protocol.Event, *protocol.MessageFrame or
// *protocol.ErrorFrame. It fails on a line that is not JSON, not one of these
// ops, or not of its op's shape.
func decodeReply(line []byte) (any, error) {
	var head struct {
		Op string `json:"op"`
	}
	if err := json.Unmarshal(line, &head); err != nil {
		return nil, err
	}
	var v any
	switch head.Op {
	case protocol.OpWelcome:
		v = &protocol.Welcome{}
	case protocol.OpOK:
		var ok okReply
		if err := json.Unmarshal(line, &ok.OK); err != nil {
			return nil, err
		}
		if err := json.Unmarshal(line, &ok.Refresh); err != nil {
			return nil, err
		}
		return &ok, nil
	case protocol.OpHB:
		v = &protocol.HBReply{}
	case protocol.OpPresence:
		v = &protocol.PresenceReply{}
	case protocol.OpGroup:
		v = &protocol.GroupReply{}
	case protocol.OpLocate:
		v = &protocol.LocateReply{}
	case protocol.OpEvent:
		v = &protocol.Event{}
	case protocol.OpMessage:
		v = &protocol.MessageFrame{}
	case protocol.OpError:
		v = &protocol.ErrorFrame{}
	default:
		return nil, fmt.Errorf("unknown op %q", head.Op)
	}
	if err := json.Unmarshal(line, v); err != nil {
		return nil, err
	}
	return v, nil
}

// okReply is an ok line, which replies to several requests: send's fills
// Delivered, refresh's TokenExpiresAt, the others neither.
type okReply struct {
	OK      protocol.OK
	Refresh protocol.RefreshReply
}

// formatReply renders a reply from decodeReply for people.
func formatReply(reply any) string {
	switch m := reply.(type) {
	case *protocol.Welcome:
		s := fmt.Sprintf("connected to %s as %s/%s (session %s, epoch %d); heartbeat every %v, session expires after %v of silence",
			m.Gateway, m.User, m.Device, m.Session, m.Epoch,
			time.Duration(m.HeartbeatMS)*time.Millisecond, time.Duration(m.TimeoutMS)*time.Millisecond)
		if m.TokenExpiresAt != "" {
			s += "; token expires at " + m.TokenExpiresAt + " (refresh before)"
		}
		return s
	case *okReply:
		switch {
		case m.OK.Delivered != nil:
			return fmt.Sprintf("ok: delivered to %d session(s)", *m.OK.Delivered)
		case m.Refresh.TokenExpiresAt != "":
			return "ok: token expires at " + m.Refresh.TokenExpiresAt
		}
		return "ok"
	case *protocol.HBReply:
		return "hb ok, session expires at " + m.ExpiresAt
	case *protocol.PresenceReply:
		var b strings.Builder
		for i, p := range m.Users {
			if i > 0 {
				b.WriteString("\n")
			}
			b.WriteString(formatPresence(p))
		}
		return b.String()
	case *protocol.GroupReply:
		var b strings.Builder
		fmt.Fprintf(&b, "group %s: %d online", m.Group, m.Online)
		for _, p := range m.Members {
			b.WriteString("\n  " + formatPresence(p))
		}
		return b.String()
	case *protocol.LocateReply:
		var b strings.Builder
		fmt.Fprintf(&b, "%s: %d active session(s)", m.User, len(m.Sessions))
		for _, s := range m.Sessions {
			fmt.Fprintf(&b, "\n  %s on %s: %s, epoch %d, %s", s.Device, s.Gateway, s.Session, s.Epoch, s.Status)
		}
		return b.String()
	case *protocol.Event:
		prefix := "* "
		if m.Group != "" {
			prefix = "* [" + m.Group + "] "
			if m.Member != nil && !*m.Member {
				if m.Online {
					return prefix + m.User + " left the group"
				}
				return prefix + m.User + " is offline" + lastSeenSuffix(m.Presence)
			}
		}
		return prefix + formatPresence(m.Presence) + fmt.Sprintf("  (v%d)", m.Version)
	case *protocol.MessageFrame:
		body := string(m.Body)
		var s string
		if json.Unmarshal(m.Body, &s) == nil {
			body = s
		}
		return fmt.Sprintf("<%s/%s> %s", m.From, m.FromDevice, body)
	case *protocol.ErrorFrame:
		if len(m.Gateways) > 0 {
			return fmt.Sprintf("error %s: %s (other gateways: %s)", m.Code, m.Message, strings.Join(m.Gateways, ", "))
		}
		return fmt.Sprintf("error %s: %s", m.Code, m.Message)
	}
	return fmt.Sprintf("%v", reply)
}

// formatPresence renders a presence in one line: "bob: busy (phone busy
// @n1, desktop available @n2)".
func formatPresence(p protocol.Presence) string {
	if !p.Online {
		return p.User + ": offline" + lastSeenSuffix(p)
	}
	parts := make([]string, 0, len(p.Sessions))
	for _, s := range p.Sessions {
		parts = append(parts, fmt.Sprintf("%s %s @%s", s.Device, s.Status, s.Gateway))
	}
	return fmt.Sprintf("%s: %s (%s)", p.User, p.Status, strings.Join(parts, ", "))
}

// lastSeenSuffix is ", last seen TIME" for a presence with a last_seen.
func lastSeenSuffix(p protocol.Presence) string {
	if p.LastSeen == "" {
		return ""
	}
	return ", last seen " + p.LastSeen
}

// parseCommand turns a command line into a request line. quit reports bye;
// a nil request without error is a line to ignore (blank) or "help".
func parseCommand(line string) (req []byte, quit bool, err error) {
	line = strings.TrimSpace(line)
	if line == "" || line == "help" || line == "?" {
		return nil, false, nil
	}
	if strings.HasPrefix(line, "{") {
		if !json.Valid([]byte(line)) {
			return nil, false, errors.New("not valid JSON")
		}
		return []byte(line), false, nil
	}
	f := strings.Fields(line)
	cmd, args := f[0], f[1:]
	var v protocol.Request
	need := func(n int, usage string) error {
		if len(args) < n {
			return fmt.Errorf("usage: %s", usage)
		}
		return nil
	}
	switch cmd {
	case "bye", "quit", "exit":
		return nil, true, nil
	case "hb":
		v = protocol.Request{Op: protocol.OpHB, ID: json.RawMessage(`"hb"`)}
	case "status":
		if err := need(1, "status available|away|busy"); err != nil {
			return nil, false, err
		}
		v = protocol.Request{Op: protocol.OpStatus, Status: args[0]}
	case "account":
		if err := need(1, "account none|away|dnd|busy|invisible  or  account auth DEVICE"); err != nil {
			return nil, false, err
		}
		switch args[0] {
		case "auth", "text", "emoji", "until":
			if err := need(2, "account "+args[0]+" VALUE"); err != nil {
				return nil, false, err
			}
			val := strings.Join(args[1:], " ")
			if val == "-" {
				val = ""
			}
			v = protocol.Request{Op: protocol.OpAccount}
			switch args[0] {
			case "auth":
				v.AuthoritativeDevice = &args[1]
				if args[1] == "-" {
					v.AuthoritativeDevice = &val
				}
			case "text":
				v.Text = &val
			case "emoji":
				v.Emoji = &val
			case "until":
				if d, err := time.ParseDuration(val); err == nil {
					val = time.Now().Add(d).UTC().Format(time.RFC3339Nano)
				}
				v.Until = &val
			}
		default:
			v = protocol.Request{Op: protocol.OpAccount, Override: &args[0]}
		}
	case "meta":
		if err := need(1, "meta JSON"); err != nil {
			return nil, false, err
		}
		raw := strings.TrimSpace(strings.TrimPrefix(line, "meta"))
		if !json.Valid([]byte(raw)) {
			return nil, false, errors.New("usage: meta JSON (a JSON object)")
		}
		v = protocol.Request{Op: protocol.OpMeta, Meta: json.RawMessage(raw)}
	case "get":
		if err := need(1, "get USER..."); err != nil {
			return nil, false, err
		}
		v = protocol.Request{Op: protocol.OpGet, Users: args}
	case "group", "join", "leave":
		if err := need(1, cmd+" NAME"); err != nil {
			return nil, false, err
		}
		v = protocol.Request{Op: cmd, Group: args[0]}
	case "locate":
		if err := need(1, cmd+" NAME"); err != nil {
			return nil, false, err
		}
		v = protocol.Request{Op: protocol.OpLocate, User: args[0]}
	case "sub", "unsub":
		if err := need(1, cmd+" USER...  or  "+cmd+" group G"); err != nil {
			return nil, false, err
		}
		if args[0] == "group" && len(args) == 2 {
			v = protocol.Request{Op: cmd, Group: args[1]}
		} else {
			v = protocol.Request{Op: cmd, Users: args}
		}
	case "refresh":
		if err := need(1, "refresh TOKEN"); err != nil {
			return nil, false, err
		}
		v = protocol.Request{Op: protocol.OpRefresh, Token: args[0]}
	case "send":
		if err := need(2, "send USER TEXT..."); err != nil {
			return nil, false, err
		}
		text := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line[len("send"):]), args[0]))
		body := json.RawMessage(text)
		if !json.Valid(body) || !(strings.HasPrefix(text, "{") || strings.HasPrefix(text, "[")) {
			quoted, err := json.Marshal(text)
			if err != nil {
				return nil, false, err
			}
			body = quoted
		}
		v = protocol.Request{Op: protocol.OpSend, To: args[0], Body: body}
	default:
		return nil, false, fmt.Errorf("unknown command %q", cmd)
	}
	b, err := json.Marshal(v)
	return b, false, err
}
