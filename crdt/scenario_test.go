package crdt

import (
	"bytes"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestScenarios runs the scripts in testdata/crdt/*.txt (from the module root). See scenario.handle for
// the command language.
func TestScenarios(t *testing.T) {
	files, err := filepath.Glob("../testdata/crdt/*.txt")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no scenarios in ../testdata/crdt")
	}
	for _, path := range files {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".txt"), func(t *testing.T) {
			s := &scenario{reps: map[string]*Replica{}, outbox: map[string][]Delta{},
				conns: map[Origin]map[Key]Session{}, handled: map[string]map[int]bool{}}
			runDataDriven(t, path, s.handle)
		})
	}
}

// scenario is the state of one script: replicas by node name (the current
// incarnation), every delta each node ever wrote, and a virtual clock that
// starts at 0 and moves only with "tick".
type scenario struct {
	now    int64
	names  []string // creation order
	reps   map[string]*Replica
	cfgs   map[string]Config
	outbox map[string][]Delta         // node -> deltas it wrote, all incarnations, numbered from 1
	conns  map[Origin]map[Key]Session // the last write of each connection a gateway serves
	// handled[from+">"+to] holds the outbox positions already delivered or
	// dropped on that link.
	handled map[string]map[int]bool
	// cursors[a+"<"+b] is where a paged pull of a from b that was stopped
	// resumes.
	cursors map[string]PageCursor
}

// handle runs one directive and returns its output. Commands:
//
//	replica a [inc=1] [horizon=10m] [purge=30m]  create a replica
//	restart a inc=2                         replace a by a new, empty incarnation
//	connect a user=u device=d epoch=1 [id=s] [groups=g1,g2] [status=away]
//	status a u/d away|available|busy        a change of a's own session
//	groups a u/d g1,g2                      a group change ("-" for none)
//	disconnect a u/d | expire a u/d         end a's own session
//	account a u [override=dnd] [auth=desktop]
//	deliver a->b [hold=1,2] [drop=3] [again=4]
//	                                        a's undelivered deltas to b, in order,
//	                                        through the codec; held ones stay
//	                                        pending; again ones are sent again
//	sync a b                                anti-entropy both ways (b's answer
//	                                        to a's digest, then the reverse)
//	pull a b [page=N [stop=K] [resume]]     a applies b's answer to a's digest;
//	                                        with page, b's answer in pages of
//	                                        at most N records or kept runs
//	                                        (DiffPage), a asking for each next
//	                                        page with its digest as it is then;
//	                                        stop leaves the transfer after K
//	                                        pages, resume goes on with it
//	missing a b                             b's own records at or below a's
//	                                        watermark for b that a neither holds
//	                                        nor holds a newer record of the key for
//	converge a b c...                       pull between every pair until nothing
//	                                        changes, then compare snapshots
//	down b node=a | up b node=a             b's failure detector on node a
//	tick 5m                                 advance the clock
//	gc b                                    tombstone GC and purge at the clock
//	presence b u | group b g | dump b | digest b
//
// After every command every replica's CheckInvariants must pass.
func (s *scenario) handle(t *testing.T, c *ddCmd) string {
	out, err := s.run(c)
	if err != nil {
		out = "error: " + err.Error()
	}
	for _, n := range s.names {
		if err := s.reps[n].CheckInvariants(); err != nil {
			t.Errorf("%s: %s: invariants of %s: %v", c.Pos, c.Line, n, err)
		}
	}
	return out
}

func (s *scenario) run(c *ddCmd) (string, error) {
	pos := c.Positional()
	need := func(n int) error {
		if len(pos) < n {
			return fmt.Errorf("%s needs %d positional arguments", c.Name, n)
		}
		return nil
	}
	if c.Name == "tick" {
		if err := need(1); err != nil {
			return "", err
		}
		d, err := time.ParseDuration(pos[0])
		if err != nil {
			return "", err
		}
		s.now += int64(d)
		return "now=" + time.Duration(s.now).String(), nil
	}
	if c.Name == "converge" {
		return s.converge(pos)
	}
	if c.Name == "deliver" {
		return s.deliver(c, pos)
	}
	if err := need(1); err != nil {
		return "", err
	}
	if c.Name == "replica" || c.Name == "restart" {
		return s.newReplica(c, pos[0])
	}
	r := s.reps[pos[0]]
	if r == nil {
		return "", fmt.Errorf("no replica %q", pos[0])
	}
	switch c.Name {
	case "connect":
		return s.connect(c, r)
	case "status", "groups", "disconnect", "expire":
		return s.change(c, r, pos)
	case "account":
		if err := need(2); err != nil {
			return "", err
		}
		ov, _ := c.Arg("override")
		o, err := ParseOverride(ov)
		if err != nil {
			return "", err
		}
		auth, _ := c.Arg("auth")
		d, err := r.PutAccountLocal(pos[1], o, auth, s.now)
		if err != nil {
			return "", err
		}
		return s.wrote(r, d), nil
	case "sync", "pull":
		if err := need(2); err != nil {
			return "", err
		}
		peer := s.reps[pos[1]]
		if peer == nil {
			return "", fmt.Errorf("no replica %q", pos[1])
		}
		var b strings.Builder
		if v, ok := c.Arg("page"); ok && c.Name == "pull" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return "", fmt.Errorf("page=%q: want a positive count", v)
			}
			stop := 0
			if v, ok := c.Arg("stop"); ok {
				if stop, err = strconv.Atoi(v); err != nil || stop < 1 {
					return "", fmt.Errorf("stop=%q: want a positive count", v)
				}
			}
			resume := slices.Contains(pos[2:], "resume")
			if err := s.pullPages(&b, pos[0], pos[1], n, stop, resume); err != nil {
				return "", err
			}
			return b.String(), nil
		}
		if err := s.pull(&b, pos[0], pos[1]); err != nil {
			return "", err
		}
		if c.Name == "sync" {
			if err := s.pull(&b, pos[1], pos[0]); err != nil {
				return "", err
			}
		}
		return b.String(), nil
	case "missing":
		if err := need(2); err != nil {
			return "", err
		}
		peer := s.reps[pos[1]]
		if peer == nil {
			return "", fmt.Errorf("no replica %q", pos[1])
		}
		return missing(r, peer), nil
	case "down", "up":
		node, ok := c.Arg("node")
		if !ok {
			return "", fmt.Errorf("%s needs node=", c.Name)
		}
		var users []string
		if c.Name == "down" {
			users = r.SetNodeDown(node, s.now)
		} else {
			users = r.SetNodeUp(node)
		}
		return "changed: " + listOrNone(users), nil
	case "gc":
		st := r.GC(s.now)
		return fmt.Sprintf("tombstones=%d purged=%d", st.Tombstones, st.Purged), nil
	case "presence":
		if err := need(2); err != nil {
			return "", err
		}
		return formatPresence(r.Presence(pos[1], 0)), nil
	case "group":
		if err := need(2); err != nil {
			return "", err
		}
		return fmt.Sprintf("%s: %d %v", pos[1], r.GroupOnlineCount(pos[1]), r.GroupOnlineUsers(pos[1])), nil
	case "dump":
		return dumpReplica(r), nil
	case "digest":
		var parts []string
		for _, e := range r.Digest() {
			parts = append(parts, fmt.Sprintf("%s=%d", e.Origin, e.Watermark))
		}
		return strings.Join(parts, " "), nil
	}
	return "", fmt.Errorf("unknown command %q", c.Name)
}

func (s *scenario) newReplica(c *ddCmd, name string) (string, error) {
	if s.cfgs == nil {
		s.cfgs = map[string]Config{}
	}
	cfg, existed := s.cfgs[name]
	if c.Name == "replica" && existed {
		return "", fmt.Errorf("replica %s exists", name)
	}
	if c.Name == "restart" && !existed {
		return "", fmt.Errorf("no replica %s to restart", name)
	}
	if !existed {
		cfg = Config{Self: Origin{Node: name, Incarnation: 1}}
	}
	if v, ok := c.Arg("inc"); ok {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return "", err
		}
		cfg.Self.Incarnation = n
	} else if existed {
		cfg.Self.Incarnation++
	}
	for key, field := range map[string]*time.Duration{"horizon": &cfg.TombstoneHorizon, "purge": &cfg.PurgeHorizon} {
		if v, ok := c.Arg(key); ok {
			d, err := time.ParseDuration(v)
			if err != nil {
				return "", err
			}
			*field = d
		}
	}
	r, err := NewReplica(cfg)
	if err != nil {
		return "", err
	}
	s.cfgs[name] = r.Config()
	s.reps[name] = r
	if !existed {
		s.names = append(s.names, name)
	}
	return r.Self().String(), nil
}

func (s *scenario) connect(c *ddCmd, r *Replica) (string, error) {
	user, _ := c.Arg("user")
	dev, _ := c.Arg("device")
	ep, _ := c.Arg("epoch")
	var epoch uint64
	var err error
	if ep == "next" {
		// as a gateway allocates: 1 + the highest epoch it knows
		epoch = 1 + r.MaxEpoch(Key{User: user, Device: dev})
	} else if epoch, err = strconv.ParseUint(ep, 10, 64); err != nil {
		return "", fmt.Errorf("epoch: %w", err)
	}
	id, ok := c.Arg("id")
	if !ok {
		id = fmt.Sprintf("%s.%s.%d", r.Self().Node, dev, epoch)
	}
	sess := Session{User: user, Device: dev, ID: id, Epoch: epoch, State: StateActive,
		ExpiresAt: s.now + int64(30*time.Second)}
	if g, ok := c.Arg("groups"); ok {
		sess.Groups = strings.Split(g, ",")
	}
	if st, ok := c.Arg("status"); ok {
		if sess.Status, err = ParseStatus(st); err != nil {
			return "", err
		}
	}
	d, err := r.PutLocal(sess, s.now)
	if err != nil {
		return "", err
	}
	return s.wrote(r, d), nil
}

// change writes a later state of r's own session for a key.
func (s *scenario) change(c *ddCmd, r *Replica, pos []string) (string, error) {
	if len(pos) < 2 {
		return "", fmt.Errorf("%s needs a user/device", c.Name)
	}
	user, dev, ok := strings.Cut(pos[1], "/")
	if !ok {
		return "", fmt.Errorf("want user/device, got %q", pos[1])
	}
	// The write comes from the connection's own memory of its session, not
	// from the replica, which may already hold a newer epoch.
	cur, ok := s.conns[r.Self()][Key{user, dev}]
	if !ok {
		return "", fmt.Errorf("%s has no connection for %s", r.Self(), pos[1])
	}
	cur.Groups = slices.Clone(cur.Groups)
	cur.ExpiresAt = s.now + int64(30*time.Second)
	switch c.Name {
	case "status":
		if len(pos) < 3 {
			return "", fmt.Errorf("status needs a status")
		}
		st, err := ParseStatus(pos[2])
		if err != nil {
			return "", err
		}
		cur.Status = st
	case "groups":
		if len(pos) < 3 {
			return "", fmt.Errorf("groups needs a list")
		}
		cur.Groups = nil
		if pos[2] != "-" {
			cur.Groups = strings.Split(pos[2], ",")
		}
	case "disconnect":
		cur.State = StateDisconnected
	case "expire":
		cur.State = StateExpired
	}
	d, err := r.PutLocal(cur, s.now)
	if err != nil {
		return "", err
	}
	return s.wrote(r, d), nil
}

// wrote records a local write in the writer's outbox and formats it.
func (s *scenario) wrote(r *Replica, d Delta) string {
	n := r.Self().Node
	s.outbox[n] = append(s.outbox[n], d)
	if d.Session != nil {
		if s.conns[r.Self()] == nil {
			s.conns[r.Self()] = map[Key]Session{}
		}
		s.conns[r.Self()][d.Session.Key()] = *d.Session.Clone()
	}
	return fmt.Sprintf("[%d] %s", len(s.outbox[n]), formatDelta(&d))
}

func (s *scenario) deliver(c *ddCmd, pos []string) (string, error) {
	if len(pos) < 1 {
		return "", fmt.Errorf("deliver needs from->to")
	}
	from, to, ok := strings.Cut(pos[0], "->")
	if !ok || s.reps[to] == nil || s.outbox[from] == nil && s.reps[from] == nil {
		return "", fmt.Errorf("deliver: bad link %q", pos[0])
	}
	set := func(key string) (map[int]bool, error) {
		m := map[int]bool{}
		v, ok := c.Arg(key)
		if !ok {
			return m, nil
		}
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(f)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", key, err)
			}
			m[n] = true
		}
		return m, nil
	}
	hold, err := set("hold")
	if err != nil {
		return "", err
	}
	drop, err := set("drop")
	if err != nil {
		return "", err
	}
	again, err := set("again")
	if err != nil {
		return "", err
	}
	link := from + ">" + to
	if s.handled[link] == nil {
		s.handled[link] = map[int]bool{}
	}
	r := s.reps[to]
	var b strings.Builder
	for i, d := range s.outbox[from] {
		n := i + 1
		if (s.handled[link][n] && !again[n]) || hold[n] {
			continue
		}
		s.handled[link][n] = true
		if drop[n] {
			fmt.Fprintf(&b, "[%d] dropped\n", n)
			continue
		}
		wire, err := AppendDeltas(nil, []Delta{d})
		if err != nil {
			return "", err
		}
		ds, err := DecodeDeltas(wire)
		if err != nil {
			return "", err
		}
		changed, dropped, err := r.Apply(ds[0], s.now)
		switch {
		case err != nil:
			fmt.Fprintf(&b, "[%d] error: %v\n", n, err)
		case changed:
			fmt.Fprintf(&b, "[%d] applied", n)
		default:
			fmt.Fprintf(&b, "[%d] ignored", n)
		}
		if len(dropped) > 0 {
			fmt.Fprintf(&b, "; retired sessions of %v", dropped)
		}
		b.WriteString("\n")
	}
	if b.Len() == 0 {
		return "nothing to deliver", nil
	}
	return b.String(), nil
}

// pull makes replica a ask b for what it lacks, through the codec, and
// describes the answer.
func (s *scenario) pull(b *strings.Builder, a, peer string) error {
	ra, rb := s.reps[a], s.reps[peer]
	dwire, err := AppendDigest(nil, ra.Digest())
	if err != nil {
		return err
	}
	dg, err := DecodeDigest(dwire)
	if err != nil {
		return err
	}
	sy, err := throughCodec(rb.Diff(dg))
	if err != nil {
		return err
	}
	describeSync(b, a+" <- "+peer+": ", sy)
	users, err := ra.ApplySync(sy, s.now)
	if err != nil {
		return err
	}
	if len(sy) == 0 {
		fmt.Fprintf(b, "%s <- %s: nothing\n", a, peer)
	} else {
		fmt.Fprintf(b, "%s <- %s: changed %s\n", a, peer, listOrNone(users))
	}
	return nil
}

// pullPages is pull with b's answer in pages of at most n records or
// kept runs each, through the codec; a asks for each next page with its
// digest as it is then. With stop > 0 it leaves the transfer after stop
// pages; resume goes on with the transfer left.
func (s *scenario) pullPages(b *strings.Builder, a, peer string, n, stop int, resume bool) error {
	ra, rb := s.reps[a], s.reps[peer]
	link := a + "<" + peer
	var cur PageCursor
	if resume {
		c, ok := s.cursors[link]
		if !ok {
			return fmt.Errorf("no transfer of %s from %s to resume", a, peer)
		}
		cur = c
	}
	delete(s.cursors, link)
	var users []string
	for k := 1; ; k++ {
		if k > 1000 {
			return fmt.Errorf("no last page after %d pages", k)
		}
		if stop > 0 && k > stop {
			if s.cursors == nil {
				s.cursors = map[string]PageCursor{}
			}
			s.cursors[link] = cur
			fmt.Fprintf(b, "%s <- %s: stopped before the page at %s after %d; changed %s\n",
				a, peer, cur.Origin, cur.After, listOrNone(sortedUnique(users)))
			return nil
		}
		dwire, err := AppendDigest(nil, ra.Digest())
		if err != nil {
			return err
		}
		dg, err := DecodeDigest(dwire)
		if err != nil {
			return err
		}
		page, next, last := rb.DiffPage(dg, cur, n, 0)
		sy, err := throughCodec(page)
		if err != nil {
			return err
		}
		size := 0
		for i := range sy {
			size += len(sy[i].Sessions) + len(sy[i].Accounts)
			if sy[i].Drop != nil {
				size += len(sy[i].Drop.Keep)
			}
		}
		if size > max(n, 1) {
			return fmt.Errorf("page %d holds %d records and kept runs, bound %d", k, size, n)
		}
		describeSync(b, fmt.Sprintf("%s <- %s page %d: ", a, peer, k), sy)
		changed, err := ra.ApplySync(sy, s.now)
		if err != nil {
			return err
		}
		users = append(users, changed...)
		if last {
			break
		}
		cur = next
	}
	fmt.Fprintf(b, "%s <- %s: changed %s\n", a, peer, listOrNone(sortedUnique(users)))
	return nil
}

// missing describes the records of peer's own origin that r's watermark
// for it covers but that r lacks (lacking).
func missing(r, peer *Replica) string {
	w := r.Watermark(peer.Self())
	out := lacking(r, peer)
	if len(out) == 0 {
		return fmt.Sprintf("none (watermark %d)", w)
	}
	return fmt.Sprintf("watermark %d, lacks %s", w, strings.Join(out, " "))
}

// lacking lists the session records of peer's own origin that r's
// watermark for it covers but that r lacks: r holds no record of the key,
// or an older one. An origin holds every record it wrote that nothing
// replaced, so a replica whose watermark covers one of them and lacks it
// has lost it for good: no digest of its asks for it again.
func lacking(r, peer *Replica) []string {
	self := peer.Self()
	w := r.Watermark(self)
	ss, _ := peer.Snapshot()
	var out []string
	for i := range ss {
		x := &ss[i]
		if x.Origin != self || x.Version > w {
			continue
		}
		if id := r.find(x.Key()); id != 0 {
			if held := r.session(r.recs.at(id), "", ""); CompareSessions(&held, x) >= 0 {
				continue
			}
		}
		out = append(out, fmt.Sprintf("%s@%d", x.Key(), x.Version))
	}
	return out
}

// throughCodec encodes and decodes a sync, as a message carries it.
func throughCodec(sy Sync) (Sync, error) {
	wire, err := AppendSync(nil, sy)
	if err != nil {
		return nil, err
	}
	return DecodeSync(wire)
}

// describeSync writes a line per origin of sy, each after prefix.
func describeSync(b *strings.Builder, prefix string, sy Sync) {
	for _, os := range sy {
		fmt.Fprintf(b, "%s%s w=%d gc=%d", prefix, os.Origin, os.Watermark, os.GCFloor)
		if os.Full {
			b.WriteString(" full")
		}
		if d := os.Drop; d != nil && d.After == d.Through {
			b.WriteString(" drop=none")
		} else if d != nil {
			fmt.Fprintf(b, " drop=(%d,%d]", d.After, d.Through)
			for _, sp := range d.Keep {
				fmt.Fprintf(b, " keep=(%d,%d]", sp.After, sp.Through)
			}
		}
		b.WriteString(":")
		for _, x := range os.Sessions {
			fmt.Fprintf(b, " %s@%d", x.Key(), x.Version)
		}
		for _, x := range os.Accounts {
			fmt.Fprintf(b, " account:%s@%d", x.User, x.Version)
		}
		b.WriteString("\n")
	}
}

func (s *scenario) converge(names []string) (string, error) {
	if len(names) < 2 {
		return "", fmt.Errorf("converge needs at least two replicas")
	}
	for _, n := range names {
		if s.reps[n] == nil {
			return "", fmt.Errorf("no replica %q", n)
		}
	}
	rounds := 0
	for changed := true; changed; rounds++ {
		if rounds > 10 {
			return "", fmt.Errorf("no fixed point after %d rounds", rounds)
		}
		changed = false
		before := map[string]string{}
		for _, n := range names {
			before[n] = fmt.Sprint(s.reps[n].Digest(), string(canonicalSnapshot(s.reps[n])))
		}
		for _, a := range names {
			for _, b := range names {
				if a != b {
					var discard strings.Builder
					if err := s.pull(&discard, a, b); err != nil {
						return "", err
					}
				}
			}
		}
		for _, n := range names {
			if fmt.Sprint(s.reps[n].Digest(), string(canonicalSnapshot(s.reps[n]))) != before[n] {
				changed = true
			}
		}
	}
	first := canonicalSnapshot(s.reps[names[0]])
	var diverged []string
	for _, n := range names[1:] {
		if !bytes.Equal(first, canonicalSnapshot(s.reps[n])) {
			diverged = append(diverged, n)
		}
	}
	if len(diverged) > 0 {
		return fmt.Sprintf("diverged after %d rounds: %v differ from %s", rounds, diverged, names[0]), nil
	}
	return fmt.Sprintf("converged after %d rounds", rounds), nil
}
