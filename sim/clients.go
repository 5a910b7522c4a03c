package sim

import (
	"errors"
	"fmt"
	"slices"

	"github.com/rollcall/rollcall/crdt"
)

// The client model. A client is one (user, device) slot. It connects to a
// random live gateway, changes status, and ends by a clean disconnect or by
// falling silent, after which its gateway expires the session the way
// node/ does: at the first expiry sweep at or after its last request plus
// Timeout (heartbeats count as requests). A client whose gateway crashes
// is gone; it may reconnect later as a new epoch, elsewhere.

// client is one (user, device) slot and its current session.
type client struct {
	id         int32
	user       string
	device     string
	group      string
	online     bool // the truth: a connected, live client
	onlineIdx  int
	owner      int32
	ownerLife  uint32
	epoch      uint64
	sessID     string
	status     crdt.Status
	connected  int64 // virtual time of the connect
	lastActive int64 // last request the owner saw (heartbeats folded in when it fails)
	diedAt     int64
}

var devices = [...]string{"phone", "laptop", "web", "tablet"}

// scheduleWorkload draws the times of the client actions (Changes, or Rate
// over Window): uniform over Window.
func (s *Sim) scheduleWorkload() {
	window := int64(s.cfg.Window)
	times := make([]int64, s.cfg.actions())
	for i := range times {
		times[i] = s.rng.Int64N(max(window, 1))
	}
	slices.Sort(times)
	for i, t := range times {
		s.q.push(event{at: t, kind: evChange, a: int32(i)})
	}
}

type action uint8

const (
	actConnect action = iota
	actStatus
	actDisconnect
	actFail
)

func (s *Sim) pickAction() action {
	c := s.cfg.Churn
	x := s.rng.Float64() * (c.Connect + c.Status + c.Disconnect + c.Fail)
	switch {
	case x < c.Connect:
		return actConnect
	case x < c.Connect+c.Status:
		return actStatus
	case x < c.Connect+c.Status+c.Disconnect:
		return actDisconnect
	}
	return actFail
}

func (s *Sim) clientAction(int) {
	a := s.pickAction()
	if a != actConnect && len(s.online) == 0 {
		a = actConnect
	}
	if a == actConnect {
		s.connect()
		return
	}
	c := s.clients[s.online[s.rng.IntN(len(s.online))]]
	switch a {
	case actStatus:
		c.status = (c.status + 1 + crdt.Status(s.rng.IntN(2))) % 3
		c.lastActive = s.now
		s.write(c, crdt.StateActive)
	case actDisconnect:
		s.setOffline(c, causeClean)
		c.lastActive = s.now // the bye is a request
		s.write(c, crdt.StateDisconnected)
	case actFail:
		s.setOffline(c, causeFail)
		s.scheduleExpiry(c)
	}
}

// connect brings a client online at a random live gateway: half the time
// a returning client (a new epoch of its slot), otherwise a new one.
func (s *Sim) connect() {
	owner := s.randomLiveNode()
	if owner < 0 {
		return
	}
	var c *client
	if off := len(s.clients) - len(s.online); off > 0 && s.rng.IntN(2) == 0 {
		for c == nil {
			if cand := s.clients[s.rng.IntN(len(s.clients))]; !cand.online {
				c = cand
			}
		}
	} else {
		id := int32(len(s.clients))
		c = &client{id: id, user: fmt.Sprintf("user-%06d", id), device: devices[s.rng.IntN(len(devices))],
			group: fmt.Sprintf("team-%03d", s.rng.IntN(100))}
		s.clients = append(s.clients, c)
		s.byUser[c.user] = id
		s.track.addClient()
	}
	n := s.nodes[owner]
	// The client sends its last epoch (last_epoch) with the hello.
	epoch, err := crdt.NextEpoch(n.r.MaxEpoch(crdt.Key{User: c.user, Device: c.device}), c.epoch, s.wall())
	if err != nil {
		panic(fmt.Sprintf("sim: connect %s/%s: %v", c.user, c.device, err)) // epochs stay near the clock's milliseconds
	}
	c.epoch = epoch
	c.sessID = fmt.Sprintf("%016x", s.rng.Uint64())
	c.owner, c.ownerLife = owner, n.life
	c.status = crdt.StatusAvailable
	c.connected, c.lastActive = s.now, s.now
	c.online = true
	c.onlineIdx = len(s.online)
	s.online = append(s.online, c.id)
	s.track.clientUp(s, c)
	s.write(c, crdt.StateActive)
}

// randomLiveNode picks a gateway uniformly among the running ones.
func (s *Sim) randomLiveNode() int32 {
	for range 64 {
		if i := int32(s.rng.IntN(s.cfg.Nodes)); s.nodes[i].up {
			return i
		}
	}
	var up []int32
	for i, n := range s.nodes {
		if n.up {
			up = append(up, int32(i))
		}
	}
	if len(up) == 0 {
		return -1
	}
	return up[s.rng.IntN(len(up))]
}

// write is the owner's write of the client's session: PutLocal, then
// Publish, and at the session's end the user's last seen, as node/ does.
func (s *Sim) write(c *client, state crdt.State) {
	n := s.nodes[c.owner]
	if !n.up || n.life != c.ownerLife {
		return
	}
	rec := crdt.OwnedSession{
		User: c.user, Device: c.device, ID: c.sessID, Epoch: c.epoch, Status: c.status,
		Groups: []string{c.group},
	}.Record(state, wallBase+c.lastActive, s.cfg.Timeout)
	d, err := n.r.PutLocal(rec, s.wall())
	if errors.Is(err, crdt.ErrSuperseded) {
		s.stats.supersededWrites++
		return
	}
	if err != nil {
		panic(fmt.Sprintf("sim: write %s/%s: %v", c.user, c.device, err))
	}
	switch {
	case state == crdt.StateActive && d.Session.Seq == 1:
		n.sessions++
	case state != crdt.StateActive:
		n.sessions--
	}
	s.newChange(c, n, d.Session)
	s.observeUser(n, c.user)
	if state == crdt.StateActive {
		s.publish(n, d)
		return
	}
	// The end is the user's last seen too: node/ writes it after the
	// session's record and publishes both at once.
	ls, err := n.r.PutLastSeen(c.user, s.wall())
	if err != nil {
		panic(fmt.Sprintf("sim: last seen of %s: %v", c.user, err))
	}
	s.publish(n, d, ls)
}

// setOffline records the truth: the client is gone.
func (s *Sim) setOffline(c *client, cause deathCause) {
	if !c.online {
		return
	}
	c.online = false
	c.diedAt = s.now
	last := s.online[len(s.online)-1]
	s.online[c.onlineIdx] = last
	s.clients[last].onlineIdx = c.onlineIdx
	s.online = s.online[:len(s.online)-1]
	s.track.clientDown(s, c, cause)
}

// scheduleExpiry finds when the owner's sweep expires a client that fell
// silent now: its last request is the later of its last action and its
// last heartbeat (heartbeats run every Heartbeat from the connect); the
// sweeps run every SweepInterval from the gateway's start, and the first
// at or after the deadline expires it.
func (s *Sim) scheduleExpiry(c *client) {
	hb := int64(s.cfg.Heartbeat)
	lastHB := c.connected + (s.now-c.connected)/hb*hb
	c.lastActive = max(c.lastActive, lastHB)
	n := s.nodes[c.owner]
	deadline := crdt.ExpiryDeadline(c.lastActive, s.cfg.Timeout)
	at := crdt.FirstSweepAt(deadline, n.born, int64(s.cfg.SweepInterval))
	s.q.push(event{at: at, kind: evExpire, a: c.id, b: c.epoch})
}

// expire is the sweep finding the client silent: the owner writes the
// session expired.
func (s *Sim) expire(id int32, epoch uint64) {
	c := s.clients[id]
	if c.online || c.epoch != epoch {
		return
	}
	s.write(c, crdt.StateExpired)
}
