package gossip

// Incarnations only grow.
//
// A gateway's incarnation (Config.Incarnation, the crdt origin it writes
// as) must exceed every earlier incarnation of its name: its peers take a
// smaller one for an old incarnation, retired, and show none of its
// sessions. The clock alone does not make it so: a clock stepped back, or
// a gateway moved to a host whose clock is behind, starts "older" than
// its previous run. NextIncarnation takes the largest of the clock, the
// incarnation kept in a state file (ReadIncarnationFile,
// WriteIncarnationFile) and the one the cluster knows (Probe, before
// joining), plus one.

import (
	"bytes"
	"errors"
	"fmt"
	"log"
	"math"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
	"go.uber.org/zap"

	"github.com/rollcall/rollcall/dissem"
)

// NextIncarnation returns the incarnation to start as: the clock in Unix
// nanoseconds, or one past the largest earlier incarnation given, whichever
// is larger. A zero earlier value (none known) counts for nothing. An
// earlier value of 2^64-1 has no successor: that is an error (no gateway
// writes it in normal operation; a forged or corrupt value does).
func NextIncarnation(now time.Time, earlier ...uint64) (uint64, error) {
	inc := uint64(max(now.UnixNano(), 1))
	for _, e := range earlier {
		if e == math.MaxUint64 {
			return 0, errors.New("gossip: an earlier incarnation of this name is 2^64-1, which no incarnation can follow")
		}
		if e != 0 && e >= inc {
			inc = e + 1
		}
	}
	return inc, nil
}

// IncarnationFileName is the state file's name in the agent's --data-dir.
const IncarnationFileName = "incarnation"

// ReadIncarnationFile returns the incarnation stored in path (written by
// WriteIncarnationFile), or 0 when there is no such file. A file that does
// not hold one decimal number is an error: the floor it kept is lost, and
// starting from the clock alone could start as an old incarnation.
func ReadIncarnationFile(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("incarnation file: %w", err)
	}
	s := strings.TrimSpace(string(b))
	inc, err := strconv.ParseUint(s, 10, 64)
	if err != nil || inc == 0 {
		if len(s) > 40 {
			s = s[:40] + "..."
		}
		return 0, fmt.Errorf("incarnation file %s is corrupt (%q is not an incarnation); remove it to start from the clock and what the cluster knows", path, s)
	}
	return inc, nil
}

// WriteIncarnationFile stores inc in path atomically: it writes a temporary
// file in the same directory, syncs it, renames it over path and syncs the
// directory, so after a crash path holds either the old or the new value.
func WriteIncarnationFile(path string, inc uint64) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("incarnation file: %w", err)
	}
	tmp := f.Name()
	_, err = f.WriteString(strconv.FormatUint(inc, 10) + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("incarnation file: %w", err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("incarnation file: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("incarnation file: sync %s: %w", dir, err)
	}
	return nil
}

// Prior is what the members reached by Probe know of a node's name.
type Prior struct {
	// Incarnation is the largest incarnation of the name any of them
	// lists, alive or not; 0: none lists it.
	Incarnation uint64
	// Reached counts the members that answered.
	Reached int

	// listed is the largest incarnation of the name in the members'
	// memberlist lists (the rest came from their replicas' digests).
	listed uint64
}

// DuplicateError is Probe's answer when a live gateway already has the
// name: two gateways cannot share one.
type DuplicateError struct {
	Name string
	Addr string // the other gateway's gossip address
}

func (e *DuplicateError) Error() string {
	return fmt.Sprintf("gossip: another live gateway is named %q (gossip address %s); names must be unique: give this one another --name, or stop that one first", e.Name, e.Addr)
}

// ErrNoMemberReached is Probe's error when none of the join addresses
// answered.
var ErrNoMemberReached = errors.New("gossip: no member reached")

// probeMeta is the metadata of Probe's memberlist node. Every Rollcall
// node's alive filter refuses it (checkMember: it is no dissem.Meta, and
// this version names it), so a probe never becomes a member anywhere.
var probeMeta = []byte("rollcall:incarnation-probe")

// probeRefusal ends the alive filter's refusal of a probe; memberlist's
// log line saying so is written at debug level (zapWriter).
const probeRefusal = "is an incarnation probe, not a member"

// Probe asks the members at cfg.Join what they know of cfg.Name, without
// joining: it starts memberlist on cfg.BindAddr with cfg's profile,
// keyring and hooks, runs a join's state exchange (push/pull) with each
// address, reads the name's incarnations in their member lists and in
// their replicas' digests, and shuts down. The members never list the
// probe: every Rollcall node's alive filter refuses its metadata. Call it
// before choosing the incarnation (NextIncarnation with the Prior's) and
// before New binds the same address.
//
// An entry of the name that a member lists alive at another address is
// pinged: if a gateway of that name answers there, Probe returns a
// *DuplicateError. One that does not answer is an earlier run not yet
// declared dead. When no join address answers, Probe returns
// ErrNoMemberReached (wrapped) and the zero Prior; with no Join, the zero
// Prior and nil.
func Probe(cfg Config) (Prior, error) {
	if err := cfg.Validate(); err != nil {
		return Prior{}, err
	}
	if len(cfg.Join) == 0 {
		return Prior{}, nil
	}
	mlc, err := profileConfig(cfg.Profile)
	if err != nil {
		return Prior{}, err
	}
	host, port, err := splitHostPort(cfg.BindAddr)
	if err != nil {
		return Prior{}, fmt.Errorf("gossip: bind address: %w", err)
	}
	lg := cfg.Logger.Named("gossip")
	p := &prober{name: cfg.Name}
	mlc.Name = cfg.Name
	mlc.BindAddr, mlc.BindPort, mlc.AdvertisePort = host, port, port
	if cfg.AdvertiseAddr != "" {
		ah, ap, err := splitHostPort(cfg.AdvertiseAddr)
		if err != nil {
			return Prior{}, fmt.Errorf("gossip: advertise address: %w", err)
		}
		mlc.AdvertiseAddr, mlc.AdvertisePort = ah, ap
	}
	mlc.Delegate = p
	mlc.Merge = p
	mlc.Keyring = cfg.Keyring
	mlc.EnableCompression = cfg.Compress
	// The probe's memberlist merges the members' lists into its own, so it
	// may see its own name at another address (an earlier run) and say
	// so at error level; what matters of it is Probe's result.
	mlc.Logger = log.New(debugWriter{lg.Named("probe")}, "", 0)
	if cfg.Memberlist != nil {
		cfg.Memberlist(mlc)
	}
	if mlc.Transport == nil {
		nt, err := newTransport(mlc.BindAddr, mlc.BindPort, mlc.Logger)
		if err != nil {
			return Prior{}, fmt.Errorf("gossip: listen on %s: %w", cfg.BindAddr, err)
		}
		var t memberlist.NodeAwareTransport = nt
		if cfg.WrapTransport != nil {
			t = cfg.WrapTransport(t)
		}
		mlc.Transport = t
		if mlc.BindPort == 0 {
			mlc.BindPort = nt.port()
			mlc.AdvertisePort = mlc.BindPort
		}
	}
	ml, err := memberlist.Create(mlc)
	if err != nil {
		return Prior{}, fmt.Errorf("gossip: start memberlist on %s: %w", cfg.BindAddr, err)
	}
	defer func() { _ = ml.Shutdown() }()
	_, joinErr := ml.Join(cfg.Join)
	p.mu.Lock()
	prior := Prior{Incarnation: max(p.inc, p.listed), Reached: p.reached, listed: p.listed}
	live := p.live
	p.mu.Unlock()
	if prior.Reached == 0 {
		return Prior{}, fmt.Errorf("%w at %v: %w", ErrNoMemberReached, cfg.Join, joinErr)
	}
	self := ml.LocalNode()
	pinged := map[string]bool{self.Address(): true}
	for _, n := range live {
		if pinged[n.Address()] {
			// Pinged already, or our own address, which this process
			// holds: an earlier run of this gateway not yet declared dead.
			continue
		}
		pinged[n.Address()] = true
		addr := &net.UDPAddr{IP: n.Addr, Port: int(n.Port)}
		if _, err := ml.Ping(cfg.Name, addr); err == nil {
			return prior, &DuplicateError{Name: cfg.Name, Addr: addr.String()}
		}
		lg.Info("an earlier run of this gateway is still listed alive but does not answer",
			zap.String("addr", addr.String()))
	}
	return prior, nil
}

// prober is Probe's memberlist delegate: it takes part in nothing and
// keeps what the members it reaches list under its name.
type prober struct {
	name string

	mu      sync.Mutex
	inc     uint64 // from the replicas' digests
	listed  uint64 // from the member lists
	reached int
	live    []memberlist.Node // entries of name listed alive or suspect
}

var (
	_ memberlist.Delegate      = (*prober)(nil)
	_ memberlist.MergeDelegate = (*prober)(nil)
)

func (p *prober) NodeMeta(int) []byte             { return probeMeta }
func (p *prober) NotifyMsg([]byte)                {}
func (p *prober) GetBroadcasts(int, int) [][]byte { return nil }
func (p *prober) LocalState(bool) []byte          { return nil }

// MergeRemoteState reads a member's push/pull state, its replica's
// digest: every incarnation it holds records of. memberlist forgets a
// dead member within a minute (GossipToTheDeadTime); replicas keep an
// old incarnation's records, and retire its newer-looking successors,
// until they are purged.
func (p *prober) MergeRemoteState(b []byte, join bool) {
	m, err := dissem.Decode(b)
	if err != nil || m.Type != dissem.TypeState {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, e := range m.Digest.Digest {
		if e.Origin.Node == p.name {
			p.inc = max(p.inc, e.Origin.Incarnation)
		}
	}
}

// NotifyMerge reads a member's list. The merge goes on, in this probe's
// memberlist only (no member admits the probe), so that memberlist hands
// MergeRemoteState the member's state.
func (p *prober) NotifyMerge(peers []*memberlist.Node) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reached++
	for _, n := range peers {
		if n.Name != p.name || bytes.Equal(n.Meta, probeMeta) {
			continue
		}
		m, err := dissem.DecodeMeta(n.Meta)
		if err != nil {
			continue
		}
		p.listed = max(p.listed, m.Incarnation)
		if n.State == memberlist.StateAlive || n.State == memberlist.StateSuspect {
			p.live = append(p.live, *n)
		}
	}
	return nil
}

// conflicts is the Cluster's memberlist.ConflictDelegate: memberlist
// calls it when an alive message gives a listed member's name another
// address, and keeps the member it had.
type conflicts Cluster

var _ memberlist.ConflictDelegate = (*conflicts)(nil)

func (d *conflicts) NotifyConflict(existing, other *memberlist.Node) {
	c := (*Cluster)(d)
	if existing.Name == c.cfg.Name {
		c.log.Error("another gateway is using this gateway's name: names must be unique; stop one of them or rename it",
			zap.String("name", existing.Name), zap.String("other_addr", other.Address()))
		return
	}
	c.log.Error("two gateways announce the same name; keeping the one listed first",
		zap.String("name", existing.Name), zap.String("listed_addr", existing.Address()), zap.String("other_addr", other.Address()))
}

// debugWriter logs each line memberlist writes at debug level.
type debugWriter struct{ log *zap.Logger }

func (w debugWriter) Write(p []byte) (int, error) {
	w.log.Debug(strings.TrimSpace(string(p)))
	return len(p), nil
}
