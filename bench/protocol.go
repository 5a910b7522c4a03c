package bench

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/rollcall/rollcall/internal/tlsconf"
)

// The worker protocol: the coordinator starts each generator process (or
// an in-process worker) and speaks to it in JSON lines, one Msg a line.
//
//	coordinator -> worker: config, then start, then stop
//	worker -> coordinator: progress (any time), connected (after config:
//	                       every session tried), result (after stop),
//	                       error (instead of the rest)

// Message types.
const (
	MsgConfig    = "config"
	MsgStart     = "start"
	MsgStop      = "stop"
	MsgProgress  = "progress"
	MsgConnected = "connected"
	MsgResult    = "result"
	MsgError     = "error"
)

// maxMsgBytes bounds one protocol line (a result with a long timeline).
const maxMsgBytes = 64 << 20

// Msg is one line of the worker protocol.
type Msg struct {
	Type      string         `json:"type"`
	Config    *WorkerConfig  `json:"config,omitempty"`
	Progress  *Progress      `json:"progress,omitempty"`
	Connected *ConnectReport `json:"connected,omitempty"`
	Result    *WorkerResult  `json:"result,omitempty"`
	Error     string         `json:"error,omitempty"`
}

// WorkerConfig is one generator's share of the run.
type WorkerConfig struct {
	Index int    `json:"index"` // worker number, 0-based
	Run   string `json:"run"`   // prefix of the users' names, unique to the run
	// Base is the global number of the worker's first session; Sessions
	// how many it opens.
	Base     int `json:"base"`
	Sessions int `json:"sessions"`

	Addrs     []string             `json:"addrs"`
	Transport string               `json:"transport"` // tcp, tls or ws
	TLS       *tlsconf.ClientFiles `json:"tls,omitempty"`
	// SecretFile, when set, holds the HS256 key tokens are minted with;
	// empty sends no token (a --dev gateway).
	SecretFile string `json:"secret_file,omitempty"`

	ConnectRate float64       `json:"connect_rate"` // sessions opened per second
	Heartbeat   time.Duration `json:"heartbeat"`    // 0: the gateway's heartbeat_ms
	StatusRate  float64       `json:"status_rate"`  // status changes per second
	Subscribers int           `json:"subscribers"`
	Watch       int           `json:"watch"` // users each subscriber watches
	Silent      int           `json:"silent"`
	SilentAfter time.Duration `json:"silent_after"`
	// Priority asks the worker to raise its scheduling priority before it
	// connects (the probe generator, a process of its own).
	Priority bool `json:"priority,omitempty"`
}

// Progress is a worker's running counts.
type Progress struct {
	Established int    `json:"established"`
	Failed      int    `json:"failed"`
	Heartbeats  uint64 `json:"heartbeats"`
	Changes     uint64 `json:"changes"`
}

// ConnectReport is a worker's connect phase.
type ConnectReport struct {
	Established int            `json:"established"`
	Failed      int            `json:"failed"`
	Errors      map[string]int `json:"errors,omitempty"` // failures by error text (the first few kinds)
	Connect     Histogram      `json:"connect"`          // client.Dial to welcome, subscriptions excluded
	Subscribed  int            `json:"subscribed"`       // subscribers whose sub succeeded
	Watched     int            `json:"watched"`          // distinct users some subscriber watches
	TimeoutMS   int64          `json:"timeout_ms"`       // the gateways' session timeout (from welcome)
	HeartbeatMS int64          `json:"heartbeat_ms"`     // the heartbeat interval in use
}

// WorkerResult is a worker's measured window.
type WorkerResult struct {
	Elapsed      time.Duration `json:"elapsed"`
	Heartbeats   uint64        `json:"heartbeats"`
	Changes      uint64        `json:"changes"`
	ChangeErrors uint64        `json:"change_errors"`
	Skipped      uint64        `json:"skipped"` // changes not sent: every changer had one in flight
	Lost         uint64        `json:"lost"`    // connections lost during the window
	Request      Histogram     `json:"request"`
	Propagation  Histogram     `json:"propagation"`
	Offline      Histogram     `json:"offline"` // last request line to offline event
	Silent       int           `json:"silent"`  // sessions made silent
	// Priority is the scheduling the worker ran at when it was asked to
	// raise it: fifo, nice or normal.
	Priority string `json:"priority,omitempty"`
	// Timeline holds one entry per second of the window.
	Timeline []Second `json:"timeline"`
}

// Second is one second of the window.
type Second struct {
	Changes uint64    `json:"changes"`
	Request Histogram `json:"request"`
}

// EncodeMsg returns m as one line, newline included.
func EncodeMsg(m Msg) ([]byte, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("bench: encode %s: %w", m.Type, err)
	}
	return append(b, '\n'), nil
}

// DecodeMsg parses and checks one protocol line.
func DecodeMsg(line []byte) (Msg, error) {
	var m Msg
	line = bytes.TrimSpace(line)
	if len(line) == 0 {
		return m, errors.New("bench: empty protocol line")
	}
	d := json.NewDecoder(bytes.NewReader(line))
	d.DisallowUnknownFields()
	if err := d.Decode(&m); err != nil {
		return Msg{}, fmt.Errorf("bench: bad protocol line: %w", err)
	}
	if d.More() {
		return Msg{}, errors.New("bench: bad protocol line: trailing data")
	}
	if err := m.check(); err != nil {
		return Msg{}, fmt.Errorf("bench: bad %q message: %w", m.Type, err)
	}
	return m, nil
}

func (m *Msg) check() error {
	want := map[string]bool{
		MsgConfig: m.Config != nil, MsgProgress: m.Progress != nil,
		MsgConnected: m.Connected != nil, MsgResult: m.Result != nil,
	}
	switch m.Type {
	case MsgConfig, MsgProgress, MsgConnected, MsgResult:
		if !want[m.Type] {
			return errors.New("missing its payload")
		}
	case MsgStart, MsgStop:
	case MsgError:
		if m.Error == "" {
			return errors.New("no error text")
		}
	default:
		return errors.New("unknown type")
	}
	n := 0
	for _, set := range want {
		if set {
			n++
		}
	}
	if n > 1 || (n == 1 && !want[m.Type]) {
		return errors.New("payload of another type")
	}
	switch {
	case m.Config != nil:
		return m.Config.Check()
	case m.Progress != nil:
		if m.Progress.Established < 0 || m.Progress.Failed < 0 {
			return errors.New("negative count")
		}
	case m.Connected != nil:
		c := m.Connected
		if c.Established < 0 || c.Failed < 0 || c.Subscribed < 0 || c.Watched < 0 || c.TimeoutMS < 0 || c.HeartbeatMS < 0 {
			return errors.New("negative count")
		}
		if c.Connect.Count() != uint64(c.Established) {
			return fmt.Errorf("%d connect times for %d sessions", c.Connect.Count(), c.Established)
		}
	case m.Result != nil:
		r := m.Result
		if r.Elapsed <= 0 {
			return errors.New("elapsed not positive")
		}
		if r.Silent < 0 {
			return errors.New("negative count")
		}
		if r.Request.Count() > r.Changes+r.ChangeErrors {
			return errors.New("more request times than requests")
		}
	}
	return nil
}

// Check reports a worker configuration that cannot run.
func (c *WorkerConfig) Check() error {
	switch {
	case c.Sessions < 0 || c.Base < 0 || c.Index < 0:
		return errors.New("negative sessions, base or index")
	case len(c.Addrs) == 0:
		return errors.New("no addrs")
	case c.Transport != "tcp" && c.Transport != "tls" && c.Transport != "ws":
		return fmt.Errorf("transport %q: want tcp, tls or ws", c.Transport)
	case c.ConnectRate <= 0:
		return errors.New("connect rate not positive")
	case c.StatusRate < 0 || c.Heartbeat < 0 || c.SilentAfter < 0:
		return errors.New("negative rate or interval")
	case c.Subscribers < 0 || c.Watch < 0 || c.Silent < 0:
		return errors.New("negative subscribers, watch or silent")
	case c.Subscribers+c.Silent > c.Sessions:
		return fmt.Errorf("%d subscribers and %d silent sessions exceed %d sessions", c.Subscribers, c.Silent, c.Sessions)
	case c.Run == "":
		return errors.New("no run name")
	}
	return nil
}
