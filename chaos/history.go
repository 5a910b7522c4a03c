package chaos

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/rollcall/rollcall/protocol"
)

// The history is JSONL: one Record a line, "t" in milliseconds since the
// run started (monotonic clock), "k" its kind:
//
//	run    the header: seed, gateways, users, settings, timeline (RunInfo)
//	gw     a gateway process: ev start (life, pid), ready, signal (sig), exit
//	       (exit: status; expected: whether the harness caused it)
//	fault  a fault of the schedule: ev start/end, fault kind, fid, gws
//	op     a client request: c (connection), op, sent (when written), t
//	       (when answered, or when it failed: err), and what it carried and
//	       got back (hello: user, dev, gw, life, role, last_epoch, status ->
//	       epoch, session, gateway; prev: the connection it replaces).
//	       hb, silent and close have t only.
//	end    a connection's reader stopped: reason is the closing error code
//	       the gateway sent (expired, superseded, shutting_down, ...) or eof
//	obs    an observation by gateway gw (life): src event (one presence, on
//	       subscriber stream c) or get (every workload user; sent, t)
//	net    a network fault's rules (with --netns): ev drop: gateway gw drops
//	       what it receives from gws (detail "in"), and what it sends them
//	       ("in+out"), all or at random (p=); ev heal: gw's rules are gone
//	stall  the harness itself did not run from "from" to t (starved): what
//	       it received just after may have waited in a socket since from
//	stop   the run ended here; the checker ignores anything later
//
// A record is written when what it describes is complete, so lines are
// only roughly in time order; readers sort by t where it matters.

// Record kinds.
const (
	KindRun   = "run"
	KindGW    = "gw"
	KindFault = "fault"
	KindOp    = "op"
	KindEnd   = "end"
	KindObs   = "obs"
	KindStop  = "stop"
	KindStall = "stall"
	KindNet   = "net"
)

// Record is one history line. Which fields are set depends on K.
type Record struct {
	T float64 `json:"t"`
	K string  `json:"k"`

	Run *RunInfo `json:"run,omitempty"`

	GW       string   `json:"gw,omitempty"`
	Life     int      `json:"life,omitempty"`
	Ev       string   `json:"ev,omitempty"`
	PID      int      `json:"pid,omitempty"`
	Sig      string   `json:"sig,omitempty"`
	Exit     string   `json:"exit,omitempty"`
	Expected bool     `json:"expected,omitempty"`
	Fault    string   `json:"fault,omitempty"`
	FID      int      `json:"fid,omitempty"`
	GWs      []string `json:"gws,omitempty"`
	Detail   string   `json:"detail,omitempty"`

	C         int     `json:"c,omitempty"`
	Prev      int     `json:"prev,omitempty"`
	Op        string  `json:"op,omitempty"`
	Sent      float64 `json:"sent,omitempty"`
	Role      string  `json:"role,omitempty"`
	User      string  `json:"user,omitempty"`
	Dev       string  `json:"dev,omitempty"`
	Status    string  `json:"status,omitempty"`
	Group     string  `json:"group,omitempty"`
	To        string  `json:"to,omitempty"`
	LastEpoch uint64  `json:"last_epoch,omitempty"`
	Epoch     uint64  `json:"epoch,omitempty"`
	Session   string  `json:"session,omitempty"`
	Gateway   string  `json:"gateway,omitempty"`
	Delivered *int    `json:"delivered,omitempty"`
	Err       string  `json:"err,omitempty"`
	Reason    string  `json:"reason,omitempty"`

	From float64 `json:"from,omitempty"`

	Src string              `json:"src,omitempty"`
	P   []protocol.Presence `json:"p,omitempty"`
}

// RunInfo is the history's header: what the checker needs to know about
// the run besides what happened. Times are history milliseconds.
type RunInfo struct {
	Seed        uint64   `json:"seed"`
	Gateways    []string `json:"gateways"`
	Users       []string `json:"users"`
	HeartbeatMS float64  `json:"heartbeat_ms"`
	TimeoutMS   float64  `json:"timeout_ms"`
	// PeerLeaseMS is the agents' --peer-lease; absent in a history of
	// agents whose peer lease was --timeout.
	PeerLeaseMS float64 `json:"peer_lease_ms,omitempty"`
	SlackMS     float64 `json:"slack_ms"`
	DrainMS     float64 `json:"drain_ms"`
	// DisconnectGraceMS is the agents' --disconnect-grace; absent in a
	// history of agents without one.
	DisconnectGraceMS float64 `json:"disconnect_grace_ms,omitempty"`
	FaultStart        float64 `json:"fault_start"`
	FaultEnd          float64 `json:"fault_end"`
	SettleStart       float64 `json:"settle_start"`
	Stop              float64 `json:"stop"`
	Netns             bool    `json:"netns,omitempty"`
	Command           string  `json:"command,omitempty"`
	AgentVersion      string  `json:"agent,omitempty"`
}

// Bounds returns the bounds for the run's settings.
func (ri *RunInfo) Bounds() Bounds {
	d := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	lease := d(ri.PeerLeaseMS)
	if lease == 0 {
		lease = d(ri.TimeoutMS)
	}
	return deriveBounds(d(ri.HeartbeatMS), d(ri.TimeoutMS), lease, d(ri.SlackMS)).WithDisconnectGrace(d(ri.DisconnectGraceMS))
}

// Recorder writes a history file. It is safe for concurrent use; every
// method may be called from any goroutine.
type Recorder struct {
	start time.Time // static after NewRecorder

	mu     sync.Mutex
	f      *os.File
	w      *bufio.Writer
	counts map[string]int
	err    error
}

// NewRecorder creates the history file at path; its clock starts now.
func NewRecorder(path string) (*Recorder, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	return &Recorder{start: time.Now(), f: f, w: bufio.NewWriterSize(f, 256<<10), counts: map[string]int{}}, nil
}

// Now is the history time: milliseconds since the recorder started,
// rounded to microseconds.
func (r *Recorder) Now() float64 {
	return math.Round(float64(time.Since(r.start))/1e3) / 1e3
}

// At converts a history time to wall-clock time.
func (r *Recorder) At(t float64) time.Time {
	return r.start.Add(time.Duration(t * float64(time.Millisecond)))
}

// Write appends rec; a zero T is filled with Now.
func (r *Recorder) Write(rec Record) {
	if rec.T == 0 {
		rec.T = r.Now()
	}
	b, err := json.Marshal(rec)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.err = err
		return
	}
	if r.f == nil {
		return // closed: a straggler after the run
	}
	r.counts[rec.K]++
	b = append(b, '\n')
	if _, err := r.w.Write(b); err != nil && r.err == nil {
		r.err = err
	}
}

// Flush writes buffered records to the file.
func (r *Recorder) Flush() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f == nil {
		return r.err
	}
	if err := r.w.Flush(); err != nil && r.err == nil {
		r.err = err
	}
	return r.err
}

// Count returns how many records of kind k were written.
func (r *Recorder) Count(k string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.counts[k]
}

// Close flushes and closes the file; later writes are dropped.
func (r *Recorder) Close() error {
	err := r.Flush()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f != nil {
		if cerr := r.f.Close(); cerr != nil && err == nil {
			err = cerr
		}
		r.f = nil
	}
	return err
}

// History is a history file read back: its records with their line
// numbers (1-based) and raw text.
type History struct {
	Records []Record
	Lines   []int    // Lines[i] is the line of Records[i]
	Raw     []string // Raw[line-1] is that line's text
}

// ReadHistory reads a history. Blank lines and lines starting with # (the
// comments of hand-written histories) are skipped. A last line cut short (a run killed while
// writing) is dropped; any other bad line is an error.
func ReadHistory(r io.Reader) (*History, error) {
	h := &History{}
	br := bufio.NewReaderSize(r, 1<<20)
	var pending error
	for n := 1; ; n++ {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			if pending != nil {
				return nil, pending
			}
			text := string(trimNL(line))
			h.Raw = append(h.Raw, text)
			if text != "" && !strings.HasPrefix(text, "#") {
				var rec Record
				if jerr := json.Unmarshal([]byte(text), &rec); jerr != nil {
					pending = fmt.Errorf("history line %d: %w", n, jerr)
				} else {
					h.Records = append(h.Records, rec)
					h.Lines = append(h.Lines, n)
				}
			}
		}
		if err == io.EOF {
			return h, nil // a bad last line is a cut-short write
		}
		if err != nil {
			return nil, err
		}
	}
}

// ReadHistoryFile reads the history at path.
func ReadHistoryFile(path string) (*History, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadHistory(f)
}

func trimNL(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}
