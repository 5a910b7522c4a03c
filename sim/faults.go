package sim

// Scheduled faults: partitions, crashes and restarts.

// split applies partition i: nodes of group j talk only within it; nodes in
// no group form group 0.
func (s *Sim) split(i int) {
	s.group = make([]int32, s.cfg.Nodes)
	for j, g := range s.cfg.Partitions[i].Groups {
		for _, n := range g {
			s.group[n] = int32(j + 1)
		}
	}
}

// heal removes every partition.
func (s *Sim) heal(int) { s.group = nil }

// crash stops a node silently: it stops sending and answering, its
// clients are gone, and what it had not yet flushed is lost.
func (s *Sim) crash(id int32) {
	n := s.nodes[id]
	if !n.up {
		return
	}
	n.up = false
	s.dropSuspicions(n)
	for _, cid := range slicesClone(s.online) {
		if c := s.clients[cid]; c.owner == id {
			s.setOffline(c, causeCrash)
		}
	}
	s.track.nodeCrashed(s, n)
	s.dropTarget(id, n.born)
}

// restart brings a crashed node back as a new incarnation with an empty
// replica. It joins through a random live member: a push/pull gives it the
// membership and (answering its digest) the replicated state, and its alive
// message, with a memberlist incarnation above any the cluster saw of its
// previous life, spreads through the broadcast queues.
func (s *Sim) restart(id int32) {
	old := s.nodes[id]
	if old.up {
		return
	}
	n, err := s.newNode(id, old.life+1, old.mlInc+1)
	if err != nil {
		panic(err)
	}
	s.nodes[id] = n
	for _, m := range s.deltaMsgList {
		clearBit(m.applied, id)
	}
	seed := s.randomLiveNode()
	if seed >= 0 && seed != id {
		sv := s.nodes[seed]
		// Join: memberlist learns the members the seed sees alive; those
		// it sees dead are not in a joiner's list at all (mergeState
		// ignores suspicions of unknown nodes), so they are dead long ago
		// here.
		for p := range int32(s.cfg.Nodes) {
			if p == id {
				continue
			}
			v := s.viewOf(sv, p)
			if p == seed {
				v = peerView{state: stAlive, inc: sv.mlInc, life: sv.life}
			}
			if v.state != stAlive {
				v = peerView{state: stDead, inc: v.inc, life: v.life, changeAt: -1 << 62}
			}
			v.susp, v.accuser, v.confirmed = 0, 0, 0 // the seed's
			s.setView(n, p, v)
			if v.state == stAlive {
				s.observeMember(n, p, v.life) // NotifyJoin
			} else {
				n.core.Unlist(s.names[p])
			}
		}
		s.broadcastML(n, part{kind: pAlive, node: id, inc: n.mlInc, life: n.life})
		s.startPushPull(n, seed)
	}
	s.startTimers(n, true)
}

func slicesClone(s []int32) []int32 { return append([]int32(nil), s...) }
