package crdt

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
)

// Delta is one replicated write: a session record, an account record or
// a last-seen register write, stamped with its origin and version. Any replica can apply any delta, in
// any order, any number of times.
//
// A delta's records are immutable once made: one delta is handed to many
// receivers (the replicas of a simulation, a gateway's peers), none of
// which may modify it; build a new record instead. A replica that applies
// a delta copies what it keeps, so the delta stays the caller's.
type Delta struct {
	// Since states coverage: together with the origin's writes at versions
	// <= Since, this delta's record covers every write the origin made in
	// (Since, Version]. An uncoalesced delta has Since = Version-1;
	// Coalesce widens it. Receivers use it to advance their watermark.
	Since    uint64
	Session  *Session
	Account  *Account
	LastSeen *LastSeen
}

// Origin returns the origin that wrote the delta's record.
func (d *Delta) Origin() Origin {
	if d.Session != nil {
		return d.Session.Origin
	}
	if d.Account != nil {
		return d.Account.Origin
	}
	if d.LastSeen != nil {
		return d.LastSeen.Origin
	}
	return Origin{}
}

// Version returns the origin's version of the delta's record.
func (d *Delta) Version() uint64 {
	if d.Session != nil {
		return d.Session.Version
	}
	if d.Account != nil {
		return d.Account.Version
	}
	if d.LastSeen != nil {
		return d.LastSeen.Version
	}
	return 0
}

// User returns the user the delta is about.
func (d *Delta) User() string {
	if d.Session != nil {
		return d.Session.User
	}
	if d.Account != nil {
		return d.Account.User
	}
	if d.LastSeen != nil {
		return d.LastSeen.User
	}
	return ""
}

// Limits on decoded records, so a hostile or corrupt peer cannot make a
// replica hold absurd values.
const (
	MaxNameLen   = 256 // user, device, session id, gateway, group names
	MaxGroups    = 256 // groups per session
	maxStateEnum = StateExpired
)

// Limits on the status fields of account and session records: those of
// the client protocol (protocol.MaxStatusTextChars and the rest; a node
// test checks that they agree), declared here too because the replicated
// state, which the simulator runs, does not depend on the client
// protocol.
const (
	MaxStatusTextChars  = 128     // Account.Text, in characters (a character is at most 4 bytes)
	MaxStatusEmojiBytes = 16      // Account.Emoji
	MaxMetaBytes        = 1 << 10 // Session.Meta
	MaxInfoBytes        = 1 << 10 // Session.Info
)

// ErrInvalidDelta is wrapped by every validation failure.
var ErrInvalidDelta = errors.New("invalid delta")

// Validate checks a decoded delta before it is applied.
func (d *Delta) Validate() error {
	if n := btoi(d.Session != nil) + btoi(d.Account != nil) + btoi(d.LastSeen != nil); n != 1 {
		return fmt.Errorf("%w: want exactly one of session, account or last seen", ErrInvalidDelta)
	}
	if d.Version() == 0 || d.Since >= d.Version() {
		return fmt.Errorf("%w: version %d, since %d", ErrInvalidDelta, d.Version(), d.Since)
	}
	switch {
	case d.Session != nil:
		return d.Session.validate()
	case d.Account != nil:
		return d.Account.validate()
	}
	return d.LastSeen.validate()
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func (s *Session) validate() error {
	if err := checkNames("session", s.User, s.Device, s.ID, s.Gateway, s.Origin.Node); err != nil {
		return err
	}
	if s.Gateway != s.Origin.Node {
		// The projection marks a node down by Gateway and finds a node's
		// records by Origin; they must name the same node.
		return fmt.Errorf("%w: session %s has gateway %q but origin %s", ErrInvalidDelta, s.Key(), s.Gateway, s.Origin)
	}
	if s.Epoch == 0 || s.Version == 0 {
		return fmt.Errorf("%w: session %s has epoch %d, version %d", ErrInvalidDelta, s.Key(), s.Epoch, s.Version)
	}
	if s.State > maxStateEnum || s.Status > StatusBusy {
		return fmt.Errorf("%w: session %s has state %d, status %d", ErrInvalidDelta, s.Key(), s.State, s.Status)
	}
	if err := checkObject("meta", s.Meta, MaxMetaBytes); err != nil {
		return fmt.Errorf("%w: session %s: %w", ErrInvalidDelta, s.Key(), err)
	}
	if err := checkObject("info", s.Info, MaxInfoBytes); err != nil {
		return fmt.Errorf("%w: session %s: %w", ErrInvalidDelta, s.Key(), err)
	}
	if len(s.Groups) > MaxGroups {
		return fmt.Errorf("%w: session %s has %d groups (max %d)", ErrInvalidDelta, s.Key(), len(s.Groups), MaxGroups)
	}
	for i, g := range s.Groups {
		if g == "" || len(g) > MaxNameLen || (i > 0 && s.Groups[i-1] >= g) {
			return fmt.Errorf("%w: session %s groups not sorted, unique and non-empty", ErrInvalidDelta, s.Key())
		}
	}
	return nil
}

func (a *Account) validate() error {
	if err := checkNames("account", a.User, "x", "x", a.Writer, a.Origin.Node); err != nil {
		return err
	}
	if len(a.AuthoritativeDevice) > MaxNameLen || a.Override > maxOverrideEnum || a.Version == 0 {
		return fmt.Errorf("%w: account %q malformed", ErrInvalidDelta, a.User)
	}
	if err := CheckStatusText(a.Text, a.Emoji); err != nil {
		return fmt.Errorf("%w: account %q: %w", ErrInvalidDelta, a.User, err)
	}
	if a.Until < 0 {
		return fmt.Errorf("%w: account %q until %d is negative", ErrInvalidDelta, a.User, a.Until)
	}
	return nil
}

// CheckStatusText checks an account's status text and emoji against the
// protocol's limits: valid UTF-8, the text at most
// MaxStatusTextChars characters, the emoji at most
// MaxStatusEmojiBytes bytes.
func CheckStatusText(text, emoji string) error {
	// The byte bound first, so an over-long text is refused before it is
	// scanned: a character is at most 4 bytes.
	if len(text) > 4*MaxStatusTextChars || !utf8.ValidString(text) {
		return fmt.Errorf("text is not valid UTF-8 of at most %d characters", MaxStatusTextChars)
	}
	if n := utf8.RuneCountInString(text); n > MaxStatusTextChars {
		return fmt.Errorf("text of %d characters (max %d)", n, MaxStatusTextChars)
	}
	if len(emoji) > MaxStatusEmojiBytes {
		return fmt.Errorf("emoji of %d bytes (max %d)", len(emoji), MaxStatusEmojiBytes)
	}
	if !utf8.ValidString(emoji) {
		return errors.New("emoji is not valid UTF-8")
	}
	return nil
}

// checkObject checks a session's meta or info: empty, or a JSON object of
// at most max bytes.
func checkObject(what, s string, max int) error {
	if s == "" {
		return nil
	}
	if len(s) > max {
		return fmt.Errorf("%s of %d bytes (max %d)", what, len(s), max)
	}
	if s[0] != '{' || !json.Valid([]byte(s)) {
		return fmt.Errorf("%s is not a JSON object", what)
	}
	return nil
}

func checkNames(what string, names ...string) error {
	for _, n := range names {
		if n == "" || len(n) > MaxNameLen {
			return fmt.Errorf("%w: %s has an empty or over-long name", ErrInvalidDelta, what)
		}
	}
	return nil
}

// Coalesce shrinks a batch of deltas from one origin, in version order and
// covering a contiguous run of that origin's writes, to the last write of
// each key, re-chaining Since so that coverage stays exact: a receiver that
// gets every kept delta advances its watermark over the whole run, and one
// that misses some advances only as far as it can prove.
// Deltas of other origins are returned unchanged, after the coalesced ones.
func Coalesce(batch []Delta) []Delta {
	if len(batch) < 2 {
		return batch
	}
	origin := batch[0].Origin()
	type slot struct {
		kind   itemKind
		user   string
		device string
	}
	last := make(map[slot]int, len(batch))
	var others []Delta
	for i := range batch {
		d := &batch[i]
		if d.Origin() != origin {
			others = append(others, *d)
			continue
		}
		s := slot{user: d.User()}
		switch {
		case d.Session != nil:
			s.kind, s.device = itemSession, d.Session.Device
		case d.Account != nil:
			s.kind = itemAccount
		default:
			s.kind = itemLastSeen
		}
		last[s] = i
	}
	keep := make([]int, 0, len(last))
	for _, i := range last {
		keep = append(keep, i)
	}
	slices.SortFunc(keep, func(a, b int) int { return cmpU64(batch[a].Version(), batch[b].Version()) })
	out := make([]Delta, 0, len(keep)+len(others))
	since := ^uint64(0)
	for i := range batch {
		if batch[i].Origin() == origin {
			since = min(since, batch[i].Since)
		}
	}
	for _, i := range keep {
		d := batch[i]
		d.Since = since
		since = d.Version()
		out = append(out, d)
	}
	return append(out, others...)
}

// Digest is a replica's per-origin watermarks, sorted by origin: what it
// holds. A peer answers it with Replica.Diff.
type Digest []DigestEntry

// DigestEntry is the watermark of one origin.
type DigestEntry struct {
	Origin    Origin
	Watermark uint64
	// Held lists runs of the origin's writes above Watermark that the
	// replica already covers (received out of order, waiting for a gap
	// below to fill), sorted and disjoint. A peer leaves records in them
	// out of its answer, so a sync after scattered losses sends what is
	// missing, not everything above the lowest gap.
	Held []Span
}

// Span is a run of an origin's writes, (After, Through], that a replica
// covers: it holds each of them or a record that dominates it.
type Span struct {
	After, Through uint64
}

// Sync is the answer to a digest: per origin, the records the asker lacks.
type Sync []OriginSync

// OriginSync carries one origin's records above the asker's watermark.
type OriginSync struct {
	Origin Origin
	// Watermark is the sender's watermark for Origin; the receiver takes
	// max(own, Watermark) after applying the records.
	Watermark uint64
	// GCFloor is the highest version of this origin the sender has garbage
	// collected or purged.
	GCFloor uint64
	// Full marks a complete snapshot of the origin's records up to
	// Watermark, sent when the asker lagged below the sender's GC floor of
	// any origin (see Replica.Diff): the receiver drops any record of the
	// origin at or below Watermark that the snapshot lacks, and merges
	// every record sent, even those at or below its own watermark.
	Full bool
	// Drop, on a Full entry of a snapshot sent in pages (Replica.DiffPage),
	// bounds what the entry drops to its range instead. nil on a whole
	// snapshot.
	Drop     *DropRange
	Sessions []Session
	Accounts []Account
	LastSeen []LastSeen
}

// DropRange is the part of an origin's log a page of a paged snapshot
// speaks for: the receiver drops its records of the origin with versions
// in (After, Through] that are neither in Keep nor among the entry's
// records. An empty range (After == Through) drops nothing: the entry's
// records merge as a Full entry's do.
type DropRange struct {
	After, Through uint64
	// Keep are runs of versions in the range that the sender holds,
	// sorted and disjoint: its records, without their contents.
	Keep []Span
}

// Len returns the number of records in the sync.
func (s Sync) Len() int {
	n := 0
	for i := range s {
		n += len(s[i].Sessions) + len(s[i].Accounts) + len(s[i].LastSeen)
	}
	return n
}

// Validate checks a decoded sync before it is applied.
func (s Sync) Validate() error {
	for i := range s {
		os := &s[i]
		if err := checkNames("sync origin", os.Origin.Node); err != nil {
			return err
		}
		if err := os.Drop.validate(os.Full); err != nil {
			return fmt.Errorf("%w: sync for %s: %w", ErrInvalidDelta, os.Origin, err)
		}
		for j := range os.Sessions {
			if os.Sessions[j].Origin != os.Origin {
				return fmt.Errorf("%w: sync for %s holds a record of %s", ErrInvalidDelta, os.Origin, os.Sessions[j].Origin)
			}
			if err := os.Sessions[j].validate(); err != nil {
				return err
			}
		}
		for j := range os.Accounts {
			if os.Accounts[j].Origin != os.Origin {
				return fmt.Errorf("%w: sync for %s holds a record of %s", ErrInvalidDelta, os.Origin, os.Accounts[j].Origin)
			}
			if err := os.Accounts[j].validate(); err != nil {
				return err
			}
		}
		for j := range os.LastSeen {
			if os.LastSeen[j].Origin != os.Origin {
				return fmt.Errorf("%w: sync for %s holds a record of %s", ErrInvalidDelta, os.Origin, os.LastSeen[j].Origin)
			}
			if err := os.LastSeen[j].validate(); err != nil {
				return err
			}
		}
	}
	return nil
}

// validate checks the range of an entry, full or not; d may be nil.
func (d *DropRange) validate(full bool) error {
	if d == nil {
		return nil
	}
	if !full {
		return errors.New("a drop range on an entry that is not full")
	}
	if d.Through < d.After {
		return fmt.Errorf("drop range (%d, %d] reversed", d.After, d.Through)
	}
	prev := d.After
	for _, sp := range d.Keep {
		if sp.After < prev || sp.Through <= sp.After || sp.Through > d.Through {
			return fmt.Errorf("kept run (%d, %d] out of order, empty or outside (%d, %d]", sp.After, sp.Through, d.After, d.Through)
		}
		prev = sp.Through
	}
	return nil
}

func compareOrigins(a, b Origin) int {
	if c := strings.Compare(a.Node, b.Node); c != 0 {
		return c
	}
	return cmpU64(a.Incarnation, b.Incarnation)
}

// WithoutLastSeen returns the sync without its last-seen records, for a
// peer that cannot read them; the watermarks are unchanged. s is not
// modified.
func (s Sync) WithoutLastSeen() Sync {
	out := s
	for i := range s {
		if len(s[i].LastSeen) == 0 {
			continue
		}
		if &out[0] == &s[0] {
			out = slices.Clone(s)
		}
		out[i].LastSeen = nil
	}
	return out
}
