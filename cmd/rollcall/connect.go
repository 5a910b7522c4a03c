package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/rollcall/rollcall/internal/tlsconf"
	"github.com/rollcall/rollcall/node"
)

const connectHelp = `commands:
  status available|away|busy      set this device's status
  account none|away|dnd|busy      set the account override
  account auth DEVICE             make DEVICE authoritative ("account auth -" clears)
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
		addr:   fs.String("addr", node.DefaultClientAddr, "gateway client address"),
		user:   fs.String("user", "", "user to connect as"),
		device: fs.String("device", "", "device name (default: the gateway assigns one)"),
		token:  fs.String("token", "", "client token (see 'rollcall token'); not needed by a --dev gateway"),
		status: fs.String("status", "", "initial status: available, away or busy"),
		groups: fs.String("groups", "", "comma-separated groups to join"),
		raw:    fs.Bool("json", false, "print the gateway's lines as raw JSON"),
		tls:    clientTLSFlags(fs),
	}
}

// connectClient runs the interactive client with explicit streams.
func connectClient(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs, cf := connectFlagSet(stderr)
	addr, user, device, token, status, groups, raw, tlsFiles := cf.addr, cf.user, cf.device, cf.token, cf.status, cf.groups, cf.raw, cf.tls
	if err := parseFlags(fs, args, os.Environ()); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if *user == "" {
		return errors.New("need --user")
	}
	tlsConfig, err := tlsFiles.Config()
	if err != nil {
		return err
	}
	nc, err := dialGateway(ctx, *addr, tlsConfig)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer nc.Close()
	cl := &interactive{nc: nc, out: stdout, raw: *raw, done: make(chan struct{})}
	hello := node.Request{Op: node.OpHello, User: *user, Device: *device, Token: *token, Status: *status, Groups: splitList(*groups)}
	if err := cl.sendJSON(hello); err != nil {
		return err
	}
	go cl.readLoop()

	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdin)
		sc.Buffer(make([]byte, 64<<10), 64<<10)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-cl.done:
				return
			}
		}
	}()
	for {
		select {
		case <-cl.done:
			return cl.result()
		case <-ctx.Done():
			return cl.bye()
		case line, ok := <-lines:
			if !ok {
				return cl.bye()
			}
			req, quit, err := parseCommand(line)
			switch {
			case err != nil:
				cl.printf("? %v (try 'help')", err)
			case quit:
				return cl.bye()
			case req == nil && strings.TrimSpace(line) == "help":
				cl.printf("%s", connectHelp)
			case req != nil:
				if err := cl.sendRaw(req); err != nil {
					return err
				}
			}
		}
	}
}

// dialGateway connects to a gateway's client port within 10 seconds: over
// TLS, handshake included, when tlsConfig is set.
func dialGateway(ctx context.Context, addr string, tlsConfig *tls.Config) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if tlsConfig != nil {
		d := tls.Dialer{Config: tlsConfig}
		return d.DialContext(ctx, "tcp", addr)
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr)
}

// interactive is the state of one `rollcall connect` session.
type interactive struct {
	nc  net.Conn
	raw bool

	wmu sync.Mutex // serialises writes to nc (commands and heartbeats)

	omu sync.Mutex // serialises writes to out
	out io.Writer

	done     chan struct{} // closed when the gateway closed the connection
	closeErr error         // the closing error the gateway sent, if any; set before done closes
	welcomed bool          // a welcome arrived; owned by readLoop
	hbOnce   sync.Once
}

func (cl *interactive) printf(format string, args ...any) {
	cl.omu.Lock()
	defer cl.omu.Unlock()
	fmt.Fprintf(cl.out, format+"\n", args...)
}

func (cl *interactive) sendRaw(line []byte) error {
	cl.wmu.Lock()
	defer cl.wmu.Unlock()
	cl.nc.SetWriteDeadline(time.Now().Add(10 * time.Second)) //nolint:errcheck // shows as a write error
	if _, err := cl.nc.Write(append(line, '\n')); err != nil {
		return fmt.Errorf("send: %w", err)
	}
	return nil
}

func (cl *interactive) sendJSON(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return cl.sendRaw(b)
}

// bye ends the session cleanly and waits for the gateway to close.
func (cl *interactive) bye() error {
	if err := cl.sendJSON(node.Request{Op: node.OpBye}); err != nil {
		<-cl.done // the connection is gone already
		return cl.result()
	}
	select {
	case <-cl.done:
		return cl.result()
	case <-time.After(5 * time.Second):
		return errors.New("the gateway did not close the connection after bye")
	}
}

func (cl *interactive) result() error { return cl.closeErr }

// readLoop prints what the gateway sends until it closes the connection.
func (cl *interactive) readLoop() {
	defer close(cl.done)
	r := bufio.NewReaderSize(cl.nc, 64<<10)
	for {
		line, err := r.ReadBytes('\n')
		if len(line) > 0 {
			cl.show(line)
		}
		if err != nil {
			if cl.closeErr == nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				cl.closeErr = err
			}
			if cl.closeErr == nil && !cl.welcomed {
				cl.closeErr = errors.New("the gateway closed the connection before its welcome (if it serves TLS, give --tls or --tls-ca)")
			}
			cl.printf("-- connection closed")
			return
		}
	}
}

// decodeReply decodes a line from the gateway into node's type for its op:
// *node.Welcome, *okReply, *node.HBReply, *node.PresenceReply,
// *node.GroupReply, *node.LocateReply, *node.Event, *node.MessageFrame or
// *node.ErrorFrame. It fails on a line that is not JSON, not one of these
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
	case node.OpWelcome:
		v = &node.Welcome{}
	case node.OpOK:
		var ok okReply
		if err := json.Unmarshal(line, &ok.OK); err != nil {
			return nil, err
		}
		if err := json.Unmarshal(line, &ok.Refresh); err != nil {
			return nil, err
		}
		return &ok, nil
	case node.OpHB:
		v = &node.HBReply{}
	case node.OpPresence:
		v = &node.PresenceReply{}
	case node.OpGroup:
		v = &node.GroupReply{}
	case node.OpLocate:
		v = &node.LocateReply{}
	case node.OpEvent:
		v = &node.Event{}
	case node.OpMessage:
		v = &node.MessageFrame{}
	case node.OpError:
		v = &node.ErrorFrame{}
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
	OK      node.OK
	Refresh node.RefreshReply
}

func (cl *interactive) show(line []byte) {
	line = []byte(strings.TrimSpace(string(line)))
	m, err := decodeReply(line)
	if err != nil {
		cl.printf("%s", line)
		return
	}
	switch m := m.(type) {
	case *node.Welcome:
		cl.welcomed = true
		if m.HeartbeatMS > 0 {
			cl.hbOnce.Do(func() { go cl.heartbeat(time.Duration(m.HeartbeatMS) * time.Millisecond) })
		}
	case *node.ErrorFrame:
		if m.Code.Closes() {
			cl.closeErr = fmt.Errorf("gateway closed the session: %s: %s", m.Code, m.Message)
		}
	}
	if cl.raw {
		cl.printf("%s", line)
		return
	}
	cl.printf("%s", formatReply(m))
}

// heartbeat sends hb every interval until the connection closes.
func (cl *interactive) heartbeat(every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-cl.done:
			return
		case <-t.C:
			if cl.sendJSON(node.Request{Op: node.OpHB}) != nil {
				return
			}
		}
	}
}

// formatReply renders a reply from decodeReply for people.
func formatReply(reply any) string {
	switch m := reply.(type) {
	case *node.Welcome:
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
	case *node.HBReply:
		return "hb ok, session expires at " + m.ExpiresAt
	case *node.PresenceReply:
		var b strings.Builder
		for i, p := range m.Users {
			if i > 0 {
				b.WriteString("\n")
			}
			b.WriteString(formatPresence(p))
		}
		return b.String()
	case *node.GroupReply:
		var b strings.Builder
		fmt.Fprintf(&b, "group %s: %d online", m.Group, m.Online)
		for _, p := range m.Members {
			b.WriteString("\n  " + formatPresence(p))
		}
		return b.String()
	case *node.LocateReply:
		var b strings.Builder
		fmt.Fprintf(&b, "%s: %d active session(s)", m.User, len(m.Sessions))
		for _, s := range m.Sessions {
			fmt.Fprintf(&b, "\n  %s on %s: %s, epoch %d, %s", s.Device, s.Gateway, s.Session, s.Epoch, s.Status)
		}
		return b.String()
	case *node.Event:
		prefix := "* "
		if m.Group != "" {
			prefix = "* [" + m.Group + "] "
			if m.Member != nil && !*m.Member {
				if m.Online {
					return prefix + m.User + " left the group"
				}
				return prefix + m.User + " is offline"
			}
		}
		return prefix + formatPresence(m.Presence) + fmt.Sprintf("  (v%d)", m.Version)
	case *node.MessageFrame:
		body := string(m.Body)
		var s string
		if json.Unmarshal(m.Body, &s) == nil {
			body = s
		}
		return fmt.Sprintf("<%s/%s> %s", m.From, m.FromDevice, body)
	case *node.ErrorFrame:
		if len(m.Gateways) > 0 {
			return fmt.Sprintf("error %s: %s (other gateways: %s)", m.Code, m.Message, strings.Join(m.Gateways, ", "))
		}
		return fmt.Sprintf("error %s: %s", m.Code, m.Message)
	}
	return fmt.Sprintf("%v", reply)
}

// formatPresence renders a presence in one line: "bob: busy (phone busy
// @n1, desktop available @n2)".
func formatPresence(p node.Presence) string {
	if !p.Online {
		return p.User + ": offline"
	}
	parts := make([]string, 0, len(p.Sessions))
	for _, s := range p.Sessions {
		parts = append(parts, fmt.Sprintf("%s %s @%s", s.Device, s.Status, s.Gateway))
	}
	return fmt.Sprintf("%s: %s (%s)", p.User, p.Status, strings.Join(parts, ", "))
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
	var v node.Request
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
		v = node.Request{Op: node.OpHB, ID: json.RawMessage(`"hb"`)}
	case "status":
		if err := need(1, "status available|away|busy"); err != nil {
			return nil, false, err
		}
		v = node.Request{Op: node.OpStatus, Status: args[0]}
	case "account":
		if err := need(1, "account none|away|dnd|busy  or  account auth DEVICE"); err != nil {
			return nil, false, err
		}
		if args[0] == "auth" {
			if err := need(2, "account auth DEVICE"); err != nil {
				return nil, false, err
			}
			dev := args[1]
			if dev == "-" {
				dev = ""
			}
			v = node.Request{Op: node.OpAccount, AuthoritativeDevice: &dev}
		} else {
			v = node.Request{Op: node.OpAccount, Override: &args[0]}
		}
	case "get":
		if err := need(1, "get USER..."); err != nil {
			return nil, false, err
		}
		v = node.Request{Op: node.OpGet, Users: args}
	case "group", "join", "leave":
		if err := need(1, cmd+" NAME"); err != nil {
			return nil, false, err
		}
		v = node.Request{Op: cmd, Group: args[0]}
	case "locate":
		if err := need(1, cmd+" NAME"); err != nil {
			return nil, false, err
		}
		v = node.Request{Op: node.OpLocate, User: args[0]}
	case "sub", "unsub":
		if err := need(1, cmd+" USER...  or  "+cmd+" group G"); err != nil {
			return nil, false, err
		}
		if args[0] == "group" && len(args) == 2 {
			v = node.Request{Op: cmd, Group: args[1]}
		} else {
			v = node.Request{Op: cmd, Users: args}
		}
	case "refresh":
		if err := need(1, "refresh TOKEN"); err != nil {
			return nil, false, err
		}
		v = node.Request{Op: node.OpRefresh, Token: args[0]}
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
		v = node.Request{Op: node.OpSend, To: args[0], Body: body}
	default:
		return nil, false, fmt.Errorf("unknown command %q", cmd)
	}
	b, err := json.Marshal(v)
	return b, false, err
}
