package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"slices"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/rollcall/rollcall/protocol"
)

// Client is a session with a Rollcall cluster that survives the loss of its
// connection: it reconnects, fails over between gateways and restores its
// status, groups and subscriptions. Its methods are safe for concurrent use.
type Client struct {
	cfg     Config
	log     *zap.Logger
	backoff Backoff
	dial    DialFunc

	ctx    context.Context // the client's lifetime; cancelled by Close or a stop
	cancel context.CancelFunc
	done   chan struct{} // closed when the run loop has stopped
	msgs   chan Message

	stateMu  sync.Mutex // serialises OnState calls
	statusMu sync.Mutex // serialises Status and SetIdle, so the last one's status is the session's
	trackMu  sync.Mutex // serialises Track, Untrack and the tracking again after a reconnect

	mu         sync.Mutex
	cur        *conn         // the connection in use, nil while reconnecting
	ready      chan struct{} // closed when cur is set; replaced when it is cleared
	device     string
	status     string          // the status the application last set
	idle       bool            // SetIdle(true): the session shows away, status is kept to restore
	meta       json.RawMessage // sent at hello; nil for none
	groups     []string
	lastEpoch  uint64
	hints      []string // gateways named by a shutting_down, tried first
	next       int      // index into cfg.Addrs of the next address to dial
	subUsers   map[string]int
	subGroups  map[string]int
	subs       map[*Subscription]struct{}
	lastVer    map[string]uint64       // subject key -> version last delivered
	tracked    map[string]trackedEntry // (user, device) key -> the session as last tracked
	trackSeq   uint64                  // orders tracked: the next entry's seq
	closing    bool
	msgsClosed bool
	err        error // why the client stopped

	raw *rawStream // set for a RawClient: every line goes to it unparsed
}

// Dial connects to one of cfg.Addrs and returns a Client once a gateway has
// welcomed the session. It retries with backoff until ctx is done (or
// Config.DialAttempts connects have failed), except when the gateway
// refuses the session itself (a bad token, a refused group, ...), which it
// returns at once as an *Error.
func Dial(ctx context.Context, cfg Config) (*Client, error) { return dial(ctx, cfg, nil) }

func dial(ctx context.Context, cfg Config, raw *rawStream) (*Client, error) {
	if len(cfg.Addrs) == 0 {
		return nil, errors.New("rollcall: Config.Addrs is empty")
	}
	if cfg.User == "" {
		return nil, errors.New("rollcall: Config.User is empty")
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Dial == nil {
		cfg.Dial = DialAny
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 10 * time.Second
	}
	if cfg.EventBuffer <= 0 {
		cfg.EventBuffer = 64
	}
	if cfg.MessageBuffer <= 0 {
		cfg.MessageBuffer = 256
	}
	meta, err := encodeMeta(cfg.Meta)
	if err != nil {
		return nil, err
	}
	c := &Client{
		cfg: cfg, log: cfg.Logger, backoff: cfg.Backoff.withDefaults(), dial: cfg.Dial,
		done: make(chan struct{}), msgs: make(chan Message, cfg.MessageBuffer),
		ready: make(chan struct{}), device: cfg.Device, status: cfg.Status,
		groups:   slices.Compact(slices.Sorted(slices.Values(cfg.Groups))),
		subUsers: map[string]int{}, subGroups: map[string]int{},
		subs: map[*Subscription]struct{}{}, lastVer: map[string]uint64{}, tracked: map[string]trackedEntry{},
		raw: raw, meta: meta,
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	stop := context.AfterFunc(ctx, c.cancel)
	cn, err := c.reconnect(ctx, nil, true)
	stop()
	if err != nil {
		c.cancel()
		return nil, err
	}
	go c.run(cn)
	return c, nil
}

// run watches the connection in use and replaces it when it ends, until the
// client stops.
func (c *Client) run(cn *conn) {
	defer close(c.done)
	if c.raw != nil {
		defer func() { c.raw.finish(cn) }()
	}
	defer c.cancel()
	for {
		select {
		case <-cn.dead:
		case <-c.ctx.Done():
			cn.close()
			return
		}
		cause := cn.err()
		if c.raw != nil {
			<-cn.readDone // the connection's lines come before its end
		}
		c.mu.Lock()
		c.cur = nil
		c.ready = make(chan struct{})
		closing := c.closing
		var e *Error
		if errors.As(cause, &e) && e.Code == protocol.CodeShuttingDown {
			c.hints = e.Gateways
		}
		c.mu.Unlock()
		if closing {
			return
		}
		if HasCode(cause, protocol.CodeSuperseded) {
			c.log.Warn("rollcall session superseded by a newer connection; stopping", zap.String("gateway", cn.gateway))
			c.stop(cause)
			return
		}
		if HasCode(cause, protocol.CodeKicked) {
			c.log.Warn("rollcall session ended by the app's backend (kicked); stopping", zap.String("gateway", cn.gateway))
			c.stop(cause)
			return
		}
		c.log.Info("rollcall connection lost; reconnecting", zap.String("gateway", cn.gateway), zap.Error(cause))
		c.setState(State{Err: cause})
		if c.raw != nil {
			c.raw.deliver(c.ctx, RawLine{Lost: cause})
		}
		next, err := c.reconnect(c.ctx, cause, false)
		if err != nil {
			c.stop(err)
			return
		}
		cn = next
		go c.retrack(cn)
	}
}

// stop ends the client with err as Err().
func (c *Client) stop(err error) {
	c.mu.Lock()
	if c.err == nil && !c.closing {
		c.err = err
	}
	subs := make([]*Subscription, 0, len(c.subs))
	for s := range c.subs {
		subs = append(subs, s)
	}
	if !c.msgsClosed {
		c.msgsClosed = true
		close(c.msgs)
	}
	c.mu.Unlock()
	c.cancel()
	for _, s := range subs {
		s.end()
	}
}

// reconnect dials until a gateway welcomes the session and the session's
// subscriptions are back, or ctx ends. first makes a refused hello fatal.
func (c *Client) reconnect(ctx context.Context, cause error, first bool) (*conn, error) {
	var lastErr error
	tries := 0
	for attempt := 0; ; {
		c.mu.Lock()
		var addr string
		hinted := len(c.hints) > 0
		if hinted {
			addr, c.hints = c.hints[0], c.hints[1:]
		}
		c.mu.Unlock()
		// A draining gateway's hints are tried at once; every other
		// attempt, the first after a loss included, waits its backoff.
		if !hinted && (!first || attempt > 0) {
			t := time.NewTimer(c.backoff.delay(attempt))
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
			}
			attempt++
		} else if !hinted {
			attempt++
		}
		if ctx.Err() != nil {
			if c.ctx.Err() != nil && !first {
				return nil, ErrClosed
			}
			return nil, fmt.Errorf("rollcall: connect: %w (last attempt: %v)", ctx.Err(), lastErr)
		}
		if !hinted {
			c.mu.Lock()
			addr = c.cfg.Addrs[c.next%len(c.cfg.Addrs)]
			c.next++
			c.mu.Unlock()
		}
		cn, err := c.connect(ctx, addr)
		if err == nil {
			c.mu.Lock()
			c.cur = cn
			close(c.ready)
			c.mu.Unlock()
			c.log.Info("rollcall connected", zap.String("addr", addr), zap.String("gateway", cn.gateway), zap.Uint64("epoch", cn.epoch))
			c.setState(State{Connected: true, Gateway: cn.gateway, Addr: addr, Epoch: cn.epoch, Err: cause})
			return cn, nil
		}
		lastErr = err
		tries++
		if first && fatalAtHello(err) {
			return nil, err
		}
		if first && c.cfg.DialAttempts > 0 && tries >= c.cfg.DialAttempts {
			return nil, fmt.Errorf("rollcall: connect to %s: %w", addr, err)
		}
		if HasCode(err, protocol.CodeSuperseded) {
			return nil, err
		}
		c.log.Info("rollcall connect failed", zap.String("addr", addr), zap.Int("attempt", attempt), zap.Error(err))
	}
}

// connect opens one connection: dial, hello, welcome, resubscribe.
func (c *Client) connect(ctx context.Context, addr string) (*conn, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.DialTimeout)
	defer cancel()
	var token string
	if c.cfg.Token != nil {
		t, err := c.cfg.Token(ctx)
		if err != nil {
			return nil, fmt.Errorf("rollcall: token: %w", err)
		}
		token = t
	}
	t, err := c.dial(ctx, addr, c.cfg.TLS)
	if err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { t.Close() })
	defer stop()
	c.mu.Lock()
	hello := protocol.Request{Op: protocol.OpHello, User: c.cfg.User, Device: c.device, Token: token, Status: c.wireStatus(),
		LastEpoch: c.lastEpoch, Groups: slices.Clone(c.groups), Meta: c.meta}
	c.mu.Unlock()
	b, _ := json.Marshal(hello)
	if err := t.WriteLine(b); err != nil {
		t.Close()
		return nil, err
	}
	var w protocol.Welcome
	for {
		line, err := t.ReadLine()
		if err != nil {
			t.Close()
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("the gateway closed the connection before its welcome: %w", err)
		}
		if len(line) == 0 {
			continue
		}
		if c.raw != nil && !c.raw.deliver(ctx, RawLine{Data: line}) {
			t.Close()
			return nil, ctx.Err()
		}
		var h protocol.Head
		if err := json.Unmarshal(line, &h); err != nil {
			t.Close()
			return nil, fmt.Errorf("rollcall: bad line from the gateway: %w", err)
		}
		if h.Op == protocol.OpWelcome {
			if err := json.Unmarshal(line, &w); err != nil {
				t.Close()
				return nil, fmt.Errorf("rollcall: bad welcome: %w", err)
			}
			if c.raw != nil {
				c.raw.started.Store(true)
			}
			break
		}
		if h.Op == protocol.OpError {
			t.Close()
			e := &Error{Code: h.Code, Message: h.Message, Gateways: h.Gateways}
			if e.Code == protocol.CodeShuttingDown {
				c.mu.Lock()
				c.hints = e.Gateways
				c.mu.Unlock()
			}
			return nil, e
		}
	}
	if !stop() {
		t.Close()
		return nil, ctx.Err()
	}
	c.mu.Lock()
	c.lastEpoch = w.Epoch
	if c.device == "" {
		c.device = w.Device
	}
	users := make([]string, 0, len(c.subUsers))
	for u := range c.subUsers {
		users = append(users, u)
	}
	groups := make([]string, 0, len(c.subGroups))
	for g := range c.subGroups {
		groups = append(groups, g)
	}
	c.mu.Unlock()
	cn := newConn(c, t, w, addr)
	go cn.readLoop()
	go cn.heartbeat(time.Duration(w.HeartbeatMS) * time.Millisecond)
	if w.TokenExpiresAt != "" && c.cfg.Token != nil && c.raw == nil {
		go cn.refreshLoop(w.TokenExpiresAt)
	}
	// Re-establish subscriptions before anyone else uses the connection.
	slices.Sort(users)
	for chunk := range slices.Chunk(users, protocol.MaxUsersPerRequest) {
		if _, err := cn.roundTrip(ctx, protocol.Request{Op: protocol.OpSub, Users: chunk}); err != nil {
			cn.close()
			return nil, fmt.Errorf("rollcall: resubscribe: %w", err)
		}
	}
	for _, g := range groups {
		if _, err := cn.roundTrip(ctx, protocol.Request{Op: protocol.OpSub, Group: g}); err != nil {
			cn.close()
			return nil, fmt.Errorf("rollcall: resubscribe group %s: %w", g, err)
		}
	}
	return cn, nil
}

func (c *Client) setState(s State) {
	if c.cfg.OnState == nil {
		return
	}
	c.stateMu.Lock()
	defer c.stateMu.Unlock()
	c.cfg.OnState(s)
}

// conn waits for the connection in use.
func (c *Client) conn(ctx context.Context) (*conn, error) {
	for {
		c.mu.Lock()
		cn, ready, closing := c.cur, c.ready, c.closing
		c.mu.Unlock()
		if closing {
			return nil, ErrClosed
		}
		if cn != nil {
			return cn, nil
		}
		select {
		case <-ready:
		case <-c.ctx.Done():
			return nil, c.stoppedErr()
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (c *Client) stoppedErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return c.err
	}
	return ErrClosed
}

// call sends req and returns its reply; an error line comes back as *Error.
// When the connection breaks first, an idempotent request is sent again on
// the next connection.
func (c *Client) call(ctx context.Context, req protocol.Request, idempotent bool, reply any) error {
	for {
		cn, err := c.conn(ctx)
		if err != nil {
			return err
		}
		line, err := cn.roundTrip(ctx, req)
		if errors.Is(err, errLost) {
			if idempotent {
				continue
			}
			return ErrConnectionLost
		}
		if err != nil {
			return err
		}
		if reply != nil {
			if err := json.Unmarshal(line, reply); err != nil {
				return fmt.Errorf("rollcall: bad %s reply: %w", req.Op, err)
			}
		}
		return nil
	}
}

// Status sets this device's status: available, away or busy. It is kept
// across reconnects. While the client is idle (SetIdle) the session stays
// away and nothing is sent: status becomes the one SetIdle(false)
// restores, and the gateway checks it then.
func (c *Client) Status(ctx context.Context, status string) error {
	c.statusMu.Lock()
	defer c.statusMu.Unlock()
	c.mu.Lock()
	if c.idle {
		c.status = status
		c.mu.Unlock()
		return nil
	}
	c.mu.Unlock()
	if err := c.call(ctx, protocol.Request{Op: protocol.OpStatus, Status: status}, true, nil); err != nil {
		return err
	}
	c.mu.Lock()
	c.status = status
	c.mu.Unlock()
	return nil
}

// statusAway is the device status an idle client shows.
const statusAway = "away"

// SetIdle marks the user idle (true: the session shows away) or back
// (false: it shows the status the application last set, with Status or
// Config.Status; available when it set none). The application's own
// status is remembered, not replaced: a Status call while idle changes
// what SetIdle(false) restores and leaves the session away. Setting the
// state the client is already in sends nothing. The idle state is kept
// across reconnects: an idle client's hello says away. If the request
// fails the state is left as it was, and SetIdle returns the error (a
// gateway's refusal of the restored status as an *Error).
func (c *Client) SetIdle(ctx context.Context, idle bool) error {
	c.statusMu.Lock()
	defer c.statusMu.Unlock()
	c.mu.Lock()
	if c.idle == idle {
		c.mu.Unlock()
		return nil
	}
	c.idle = idle // a reconnect from here on says hello with the new state
	wire := c.wireStatus()
	c.mu.Unlock()
	if wire == "" {
		wire = "available"
	}
	err := c.call(ctx, protocol.Request{Op: protocol.OpStatus, Status: wire}, true, nil)
	if err != nil {
		c.mu.Lock()
		c.idle = !idle
		c.mu.Unlock()
	}
	return err
}

// Idle reports whether the client is idle (SetIdle).
func (c *Client) Idle() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.idle
}

// wireStatus is the status the session shows: away while idle, else the
// application's ("" for the gateway's default). c.mu is held.
func (c *Client) wireStatus() string {
	if c.idle {
		return statusAway
	}
	return c.status
}

// AccountUpdate is what Account changes; nil fields are left as they are.
type AccountUpdate struct {
	// Override is none, away, dnd, busy or invisible (SetInvisible).
	Override *string
	// AuthoritativeDevice names the device whose status speaks for the
	// user ("" for none).
	AuthoritativeDevice *string
	// Text is the status text (at most protocol.MaxStatusTextChars
	// characters) and Emoji its emoji (at most protocol.MaxStatusEmojiBytes
	// bytes); "" clears either.
	Text, Emoji *string
	// Until is when the override, text and emoji lapse; the zero Time
	// clears it (they last until changed).
	Until *time.Time
}

// Account changes the user's account settings, which apply across all of
// the user's devices.
func (c *Client) Account(ctx context.Context, u AccountUpdate) error {
	req := protocol.Request{Op: protocol.OpAccount, Override: u.Override, AuthoritativeDevice: u.AuthoritativeDevice,
		Text: u.Text, Emoji: u.Emoji}
	if u.Until != nil {
		s := ""
		if !u.Until.IsZero() {
			s = u.Until.UTC().Format(time.RFC3339Nano)
		}
		req.Until = &s
	}
	return c.call(ctx, req, true, nil)
}

// SetStatusText sets the user's status text and emoji, lapsing at until
// (the zero Time: never); empty strings clear them.
func (c *Client) SetStatusText(ctx context.Context, text, emoji string, until time.Time) error {
	return c.Account(ctx, AccountUpdate{Text: &text, Emoji: &emoji, Until: &until})
}

// SetInvisible sets the account override to invisible (true) or to none
// (false; it replaces any other override too). While invisible, every
// reader but the user's own sessions and backends sees the user offline;
// the user's own reads carry the truth with Presence.Invisible. The user
// still sends and receives messages. An Until set with Account lapses it
// like any override.
func (c *Client) SetInvisible(ctx context.Context, on bool) error {
	ov := "none"
	if on {
		ov = "invisible"
	}
	return c.Account(ctx, AccountUpdate{Override: &ov})
}

// SetMeta sets this session's meta: a value that encodes to a JSON object
// of at most protocol.MaxMetaBytes, or nil to clear it. Subscribers see it
// in the session's entry of the user's presence; it is kept across
// reconnects. The gateway limits how often a session may change it.
func (c *Client) SetMeta(ctx context.Context, meta any) error {
	raw, err := encodeMeta(meta)
	if err != nil {
		return err
	}
	req := protocol.Request{Op: protocol.OpMeta, Meta: raw}
	if raw == nil {
		req.Meta = json.RawMessage("{}")
	}
	if err := c.call(ctx, req, true, nil); err != nil {
		return err
	}
	c.mu.Lock()
	c.meta = raw
	c.mu.Unlock()
	return nil
}

// encodeMeta encodes a session's meta (nil for none).
func encodeMeta(meta any) (json.RawMessage, error) {
	if meta == nil {
		return nil, nil
	}
	raw, err := json.Marshal(meta)
	if err != nil {
		return nil, fmt.Errorf("rollcall: meta: %w", err)
	}
	if len(raw) == 0 || raw[0] != '{' {
		return nil, errors.New("rollcall: meta must encode to a JSON object")
	}
	return raw, nil
}

// Join joins a group; it is rejoined at every reconnect.
func (c *Client) Join(ctx context.Context, group string) error {
	if err := c.call(ctx, protocol.Request{Op: protocol.OpJoin, Group: group}, true, nil); err != nil {
		return err
	}
	c.mu.Lock()
	if !slices.Contains(c.groups, group) {
		c.groups = append(c.groups, group)
	}
	c.mu.Unlock()
	return nil
}

// Leave leaves a group.
func (c *Client) Leave(ctx context.Context, group string) error {
	c.mu.Lock()
	c.groups = slices.DeleteFunc(c.groups, func(g string) bool { return g == group })
	c.mu.Unlock()
	return c.call(ctx, protocol.Request{Op: protocol.OpLeave, Group: group}, true, nil)
}

// Get returns the presence of a user.
func (c *Client) Get(ctx context.Context, user string) (protocol.Presence, error) {
	ps, err := c.GetMany(ctx, user)
	if err != nil {
		return protocol.Presence{}, err
	}
	if len(ps) != 1 {
		return protocol.Presence{}, fmt.Errorf("rollcall: get returned %d users", len(ps))
	}
	return ps[0], nil
}

// GetMany returns the presence of users (at most 1000), in order.
func (c *Client) GetMany(ctx context.Context, users ...string) ([]protocol.Presence, error) {
	var r protocol.PresenceReply
	if err := c.call(ctx, protocol.Request{Op: protocol.OpGet, Users: users}, true, &r); err != nil {
		return nil, err
	}
	return r.Users, nil
}

// GroupInfo is a group's online members, or a page of them (GroupPage).
type GroupInfo struct {
	Group string
	// Online counts the group's online members, on every page.
	Online  int
	Members []protocol.Presence
	// Next, from GroupPage, is the cursor of the next page; empty after
	// the last.
	Next string
}

// GroupPage returns one page of a group's online members, in user-name
// order: at most limit of them (0: protocol.DefaultGroupPage; at most
// protocol.MaxGroupPage; the gateway may return fewer), after cursor
// (empty: from the first; else a page's Next). Members may come and go
// between pages: a member who joins behind the cursor is not seen, one who
// leaves ahead of it is not listed.
func (c *Client) GroupPage(ctx context.Context, group string, limit int, cursor string) (GroupInfo, error) {
	if limit < 0 || limit > protocol.MaxGroupPage {
		return GroupInfo{}, fmt.Errorf("rollcall: group page limit %d: want 0 to %d", limit, protocol.MaxGroupPage)
	}
	req := protocol.Request{Op: protocol.OpGroup, Group: group, Cursor: cursor}
	if limit > 0 {
		req.Limit = &limit
	}
	var r protocol.GroupReply
	if err := c.call(ctx, req, true, &r); err != nil {
		return GroupInfo{}, err
	}
	return GroupInfo{Group: r.Group, Online: r.Online, Members: r.Members, Next: r.Next}, nil
}

// GroupCount returns how many members of a group are online, without
// their presence.
func (c *Client) GroupCount(ctx context.Context, group string) (int, error) {
	zero := 0
	var r protocol.GroupReply
	if err := c.call(ctx, protocol.Request{Op: protocol.OpGroup, Group: group, Limit: &zero}, true, &r); err != nil {
		return 0, err
	}
	return r.Online, nil
}

// GroupMembers iterates over a group's online members, in user-name
// order, a page of up to limit at a time (as GroupPage). It stops at the
// first error, which it yields with a zero Presence.
func (c *Client) GroupMembers(ctx context.Context, group string, limit int) iter.Seq2[protocol.Presence, error] {
	return func(yield func(protocol.Presence, error) bool) {
		cursor := ""
		for {
			page, err := c.GroupPage(ctx, group, limit, cursor)
			if err != nil {
				yield(protocol.Presence{}, err)
				return
			}
			for _, m := range page.Members {
				if !yield(m, nil) {
					return
				}
			}
			if page.Next == "" {
				return
			}
			cursor = page.Next
		}
	}
}

// Group returns the online members of a group: every page of them
// (GroupMembers), with Online from the last page.
func (c *Client) Group(ctx context.Context, group string) (GroupInfo, error) {
	info := GroupInfo{Group: group}
	cursor := ""
	for {
		page, err := c.GroupPage(ctx, group, 0, cursor)
		if err != nil {
			return GroupInfo{}, err
		}
		info.Online = page.Online
		info.Members = append(info.Members, page.Members...)
		if page.Next == "" {
			if info.Members == nil {
				info.Members = []protocol.Presence{}
			}
			return info, nil
		}
		cursor = page.Next
	}
}

// Locate returns the active sessions of a user, with the client address
// of each one's gateway when known.
func (c *Client) Locate(ctx context.Context, user string) ([]protocol.SessionInfo, error) {
	var r protocol.LocateReply
	if err := c.call(ctx, protocol.Request{Op: protocol.OpLocate, User: user}, true, &r); err != nil {
		return nil, err
	}
	return r.Sessions, nil
}

// Send messages every active session of a user; body is any JSON value
// (json.RawMessage, or a value json.Marshal accepts). It returns how many
// sessions received it. It is not retried: if the connection breaks before
// the reply it returns ErrConnectionLost.
func (c *Client) Send(ctx context.Context, to string, body any) (int, error) {
	raw, ok := body.(json.RawMessage)
	if !ok {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		raw = b
	}
	var r protocol.OK
	if err := c.call(ctx, protocol.Request{Op: protocol.OpSend, To: to, Body: raw}, false, &r); err != nil {
		return 0, err
	}
	if r.Delivered == nil {
		return 0, nil
	}
	return *r.Delivered, nil
}

// Message is a message sent to this user.
type Message struct {
	From, FromDevice string
	Body             json.RawMessage
}

// Messages delivers the messages sent to this user. It is closed when the
// client stops.
func (c *Client) Messages() <-chan Message { return c.msgs }

// Session describes the current connection.
type Session struct {
	Session, Device, Gateway, Addr string
	Epoch                          uint64
}

// Session returns the current connection's session, and false while
// reconnecting.
func (c *Client) Session() (Session, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur == nil {
		return Session{}, false
	}
	return Session{Session: c.cur.session, Device: c.device, Gateway: c.cur.gateway, Addr: c.cur.addr, Epoch: c.cur.epoch}, true
}

// Done is closed when the client has stopped: after Close, or when the
// session was superseded or kicked (see Err).
func (c *Client) Done() <-chan struct{} { return c.done }

// Err is why the client stopped: nil while it runs and after Close; an
// *Error with CodeSuperseded when another connection took this (user,
// device) (the client does not fight it); an *Error with CodeKicked when
// the app's backend ended the session (the client does not reconnect: a
// new Dial opens a new session).
func (c *Client) Err() error {
	select {
	case <-c.done:
	default:
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// beginClose marks the client closing and returns its connection (nil
// while it reconnects). first is false when another Close came first; then
// beginClose returns once the client has stopped.
func (c *Client) beginClose() (cn *conn, first bool) {
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		<-c.done
		return nil, false
	}
	c.closing = true
	cn = c.cur
	c.mu.Unlock()
	return cn, true
}

// Close ends the session cleanly (bye: it shows offline at once) and stops
// the client. Subscription channels and Messages are closed.
func (c *Client) Close() error {
	cn, first := c.beginClose()
	if !first {
		return nil
	}
	var err error
	if cn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err = cn.roundTrip(ctx, protocol.Request{Op: protocol.OpBye})
		cancel()
		if errors.Is(err, errLost) {
			err = nil // the gateway closes right after its ok
		}
		cn.close()
	}
	c.stop(nil)
	<-c.done
	return err
}

// subject keys: a user subscription's events, and a group's.
func subjectKey(group, user string) string { return group + "\x00" + user }

// dispatch delivers an event frame to the subscriptions it concerns, unless
// its version is not newer than the last delivered for its subject.
func (c *Client) dispatch(f *protocol.Event) {
	key := subjectKey(f.Group, f.User)
	c.mu.Lock()
	if f.Version <= c.lastVer[key] {
		c.mu.Unlock()
		c.log.Debug("rollcall stale event dropped", zap.String("user", f.User), zap.Uint64("version", f.Version))
		return
	}
	c.lastVer[key] = f.Version
	var targets []*Subscription
	for s := range c.subs {
		if s.wants(f.Group, f.User) {
			targets = append(targets, s)
		}
	}
	c.mu.Unlock()
	ev := Event{Presence: f.Presence, Group: f.Group, Member: f.Member == nil || *f.Member}
	for _, s := range targets {
		s.push(key, ev)
	}
}

func (c *Client) deliverMessage(f *protocol.MessageFrame) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.msgsClosed {
		return
	}
	select {
	case c.msgs <- Message{From: f.From, FromDevice: f.FromDevice, Body: f.Body}:
	default:
		c.log.Warn("rollcall message dropped: Messages channel full", zap.String("from", f.From))
	}
}

// idString is the JSON form of a request id, as echoed.
func idString(id uint64) string { return strconv.FormatUint(id, 10) }
