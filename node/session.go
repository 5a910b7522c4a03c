package node

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"slices"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/rollcall/rollcall/auth"
	"github.com/rollcall/rollcall/crdt"
	"github.com/rollcall/rollcall/protocol"
)

// localSession is the session a connection owns. Guarded by n.mu.
type localSession struct {
	user   string
	device string
	id     string
	epoch  uint64
	status crdt.Status
	groups []string // sorted, unique
	meta   string   // compact JSON object, "" for none
	info   string   // the token's rollcall.info, compact; "" for none

	sends tokenBucket // the session's allowance of sends (Config.SendRate)
	metas tokenBucket // the session's allowance of meta requests (Config.MetaRate)
}

// The session lifecycle (the seed's state machine), every transition a crdt
// write by this node:
//
//	Connecting -> Active        handleHello: PutLocal(active), epoch =
//	                            crdt.NextEpoch(replica.MaxEpoch, last_epoch,
//	                            now): above both, at least the clock in ms,
//	                            refused (epoch_exhausted) past MaxEpoch
//	Active -> Active            status/join/leave: PutLocal(active, Seq+1);
//	                            any request refreshes the deadline (no write)
//	Active -> Disconnected      handleBye, connLost (TCP closed), Drain,
//	                            graceOver (the connection dropped and no
//	                            newer epoch came within DisconnectGrace)
//	Active -> Expired           expireSession (the sweeper found it silent)
//	Active -> (superseded)      a newer epoch for the same (user, device),
//	                            here or on another gateway: no write, the
//	                            newer record already replaced ours

// handleHello authenticates the connection and opens its session.
func (n *Node) handleHello(c *conn, req *protocol.Request) {
	if c.state.Load() != stateConnecting {
		c.sendError(req.ID, protocol.CodeBadRequest, "already authenticated")
		return
	}
	if req.Token == "" {
		// A WebSocket upgrade's token (ws.go), checked and verified as one
		// in hello.
		req.Token = c.upgradeToken
	}
	if rerr := checkHello(req); rerr != nil {
		n.stats.badRequests.Add(1)
		c.sendError(req.ID, rerr.code, rerr.msg)
		return
	}
	// The address's hello rate before the token costs a signature check,
	// the user's once the token says who it is (hellolimit.go).
	if rerr := n.allowHelloFrom(c.ip, n.mono()); rerr != nil {
		c.sendError(req.ID, rerr.code, rerr.msg)
		return
	}
	grants, tokenExpires := auth.Unrestricted(), ""
	var id *auth.Identity
	if !n.cfg.Dev {
		var err error
		if id, err = n.verifyToken(req.Token, req.User); err != nil {
			n.stats.authFailed.Add(1)
			n.log.Info("authentication failed", zap.Uint64("conn", c.id), zap.String("remote", c.remote),
				zap.String("user", req.User), zap.Error(err))
			c.sendError(req.ID, protocol.CodeAuthFailed, err.Error())
			return
		}
		grants, tokenExpires = id.Grants, n.formatTime(id.Expires)
	}
	if rerr := n.allowHelloOf(req.User, n.mono()); rerr != nil {
		c.sendError(req.ID, rerr.code, rerr.msg)
		return
	}
	if rerr := checkJoin(grants, req.Groups); rerr != nil {
		// The connection stays, waiting for a hello it may make.
		n.stats.forbidden.Add(1)
		c.sendError(req.ID, rerr.code, rerr.msg)
		return
	}
	if id != nil {
		n.setToken(c, id)
	} else {
		c.grants.Store(grants)
		c.tokenDeadline.Store(0)
	}
	status := crdt.StatusAvailable
	if req.Status != "" {
		status, _ = crdt.ParseStatus(req.Status) // checked by checkHello
	}
	device := req.Device
	if device == "" {
		device = "dev-" + randomHex(6)
	}
	sess := &localSession{
		user:   req.User,
		device: device,
		id:     "ses_" + randomHex(8),
		status: status,
		groups: crdt.NormalizeGroups(slices.Clone(req.Groups)),
	}
	if req.Meta != nil {
		sess.meta, _ = checkMeta(req.Meta) // checked by checkHello
	}
	if id != nil {
		sess.info = id.Info
	}
	now := n.clock.Now()
	mono := n.monoAt(now)

	lk := lockOf(&n.mu)
	defer lk.unlock()
	if n.draining {
		lk.unlock()
		c.closeWith(shuttingDownFrame(req.ID, n.otherGateways()))
		return
	}
	if rerr := n.sessionCapLocked(c, sess.user, sess.device); rerr != nil {
		lk.unlock()
		c.sendError(req.ID, rerr.code, rerr.msg)
		return
	}
	key := crdt.Key{User: sess.user, Device: sess.device}
	epoch, err := crdt.NextEpoch(n.replica.MaxEpoch(key), req.LastEpoch, now.UnixNano())
	if exh, ok := errors.AsType[*crdt.EpochExhaustedError](err); ok {
		// No epoch above the held one can be issued (a peer may have
		// taught the replica any epoch, up to 2^64-1): refuse, rather
		// than wrap to an epoch every replica would refuse.
		lk.unlock()
		n.stats.badRequests.Add(1)
		n.log.Info("hello refused: epoch exhausted", zap.Uint64("conn", c.id), zap.String("key", key.String()), zap.Uint64("held", exh.Held))
		c.sendError(req.ID, protocol.CodeEpochExhausted, "no newer epoch exists for "+key.String()+
			": it holds epoch "+utoa(exh.Held)+" and the largest is "+utoa(protocol.MaxEpoch)+"; connect with another device name")
		return
	}
	if !c.state.CompareAndSwap(stateConnecting, stateActive) {
		lk.unlock() // closing already: nothing to open
		return
	}
	sess.epoch = epoch
	c.lastActive.Store(mono)
	c.sess = sess
	d, err := n.replica.PutLocal(n.recordLocked(c, crdt.StateActive, now), now.UnixNano())
	if err != nil {
		// Cannot happen: the epoch is above every one held.
		c.sess = nil
		c.state.Store(stateConnecting)
		lk.unlock()
		n.log.Error("open session", zap.String("key", key.String()), zap.Error(err))
		c.sendError(req.ID, protocol.CodeInternal, "could not open the session")
		return
	}
	old := n.local[sess.user][sess.device]
	if old != nil {
		n.unregisterLocked(old)
	}
	n.dropTrackedLocked(key)
	n.registerLocked(c)
	n.markDirtyLocked(sess.user)
	n.unlockAndPublish(&lk, []crdt.Delta{d})

	n.stats.sessionsOpened.Add(1)
	c.handshakeDone() // the sweeper takes over from the handshake deadline
	n.wheel.add(c, c.deadline(int64(n.cfg.Timeout)))
	c.sendValue(protocol.Welcome{
		Op: protocol.OpWelcome, ID: req.ID, Session: sess.id, User: sess.user, Device: sess.device,
		Epoch: sess.epoch, Gateway: n.cfg.Name,
		HeartbeatMS: n.cfg.Heartbeat.Milliseconds(), TimeoutMS: n.cfg.Timeout.Milliseconds(),
		ExpiresAt: n.formatTime(now.Add(n.cfg.Timeout)), Protocol: protocol.Version,
		TokenExpiresAt: tokenExpires,
	})
	n.log.Debug("session opened", zap.Uint64("conn", c.id), zap.String("user", sess.user),
		zap.String("device", sess.device), zap.Uint64("epoch", sess.epoch), zap.String("session", sess.id))
	if old != nil {
		n.stats.superseded.Add(1)
		old.closeWithError(nil, protocol.CodeSuperseded, "a newer connection (epoch "+utoa(sess.epoch)+") took "+key.String())
	}
}

// checkHello validates a hello's fields.
func checkHello(req *protocol.Request) *requestError {
	if req.Protocol != 0 && req.Protocol != protocol.Version {
		return errorf(protocol.CodeUnsupportedProtocol, "protocol %d is not supported: this gateway speaks protocol %d", req.Protocol, protocol.Version)
	}
	if rerr := checkName("user", req.User); rerr != nil {
		return rerr
	}
	if req.Device != "" {
		if rerr := checkName("device", req.Device); rerr != nil {
			return rerr
		}
	}
	if req.Status != "" {
		if _, err := crdt.ParseStatus(req.Status); err != nil {
			return errorf(protocol.CodeBadRequest, "%v", err)
		}
	}
	if len(req.Groups) > protocol.MaxGroups {
		return errorf(protocol.CodeBadRequest, "at most %d groups", protocol.MaxGroups)
	}
	for _, g := range req.Groups {
		if rerr := checkName("group", g); rerr != nil {
			return rerr
		}
	}
	if req.LastEpoch >= protocol.MaxEpoch {
		return errorf(protocol.CodeBadRequest, "last_epoch %d out of range: epochs are below %d (2^53-1)", req.LastEpoch, uint64(protocol.MaxEpoch))
	}
	if len(req.Token) > protocol.MaxTokenLen {
		return errorf(protocol.CodeBadRequest, "token longer than %d bytes", protocol.MaxTokenLen)
	}
	if req.Meta != nil {
		if _, rerr := checkMeta(req.Meta); rerr != nil {
			return rerr
		}
	}
	return nil
}

// checkName validates a user, device or group name: 1 to MaxNameLen bytes
// of UTF-8 without control characters.
func checkName(what, s string) *requestError {
	if s == "" {
		return errorf(protocol.CodeBadRequest, "missing %s", what)
	}
	if len(s) > protocol.MaxNameLen {
		return errorf(protocol.CodeBadRequest, "%s longer than %d bytes", what, protocol.MaxNameLen)
	}
	if !utf8.ValidString(s) {
		return errorf(protocol.CodeBadRequest, "%s is not valid UTF-8", what)
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f || r == utf8.RuneError {
			return errorf(protocol.CodeBadRequest, "%s contains a control character", what)
		}
	}
	return nil
}

// handleStatus sets the device's status.
func (n *Node) handleStatus(c *conn, req *protocol.Request) (any, *requestError) {
	st, err := crdt.ParseStatus(req.Status)
	if err != nil {
		return nil, errorf(protocol.CodeBadRequest, "%v", err)
	}
	return n.updateSession(c, req, func(s *localSession) bool {
		if s.status == st {
			return false
		}
		s.status = st
		return true
	})
}

// handleJoinLeave adds the session to a group or removes it.
func (n *Node) handleJoinLeave(c *conn, req *protocol.Request) (any, *requestError) {
	if rerr := checkName("group", req.Group); rerr != nil {
		return nil, rerr
	}
	g := req.Group
	if req.Op == protocol.OpJoin {
		if rerr := checkJoin(c.sessionGrants(), []string{g}); rerr != nil {
			return nil, rerr
		}
	}
	var rerr *requestError
	reply, uerr := n.updateSession(c, req, func(s *localSession) bool {
		i, in := slices.BinarySearch(s.groups, g)
		switch {
		case req.Op == protocol.OpJoin && !in:
			if len(s.groups) >= protocol.MaxGroups {
				rerr = errorf(protocol.CodeBadRequest, "at most %d groups per session", protocol.MaxGroups)
				return false
			}
			s.groups = slices.Insert(slices.Clone(s.groups), i, g)
			return true
		case req.Op == protocol.OpLeave && in:
			s.groups = slices.Delete(slices.Clone(s.groups), i, i+1)
			return true
		}
		return false
	})
	if rerr != nil {
		return nil, rerr
	}
	return reply, uerr
}

// updateSession applies change to the connection's session and writes it.
// change returns false for a no-op, which is acknowledged without a write.
func (n *Node) updateSession(c *conn, req *protocol.Request, change func(*localSession) bool) (any, *requestError) {
	now := n.clock.Now()
	lk := lockOf(&n.mu)
	defer lk.unlock()
	n.underLockHook(req)
	s, rerr := n.ownedLocked(c)
	if rerr != nil {
		lk.unlock()
		return nil, rerr
	}
	saved := *s
	if !change(s) {
		lk.unlock()
		return protocol.OK{Op: protocol.OpOK, ID: req.ID}, nil
	}
	d, err := n.replica.PutLocal(n.recordLocked(c, crdt.StateActive, now), now.UnixNano())
	if err != nil {
		*s = saved
		rerr := n.writeFailedLocked(c, err)
		lk.unlock()
		return nil, rerr
	}
	n.markDirtyLocked(s.user)
	n.unlockAndPublish(&lk, []crdt.Delta{d})
	return protocol.OK{Op: protocol.OpOK, ID: req.ID}, nil
}

// writeFailedLocked handles a failed PutLocal of c's session: a newer
// record (from another gateway) won, so c no longer owns the session.
func (n *Node) writeFailedLocked(c *conn, err error) *requestError {
	if errors.Is(err, crdt.ErrSuperseded) {
		n.unregisterLocked(c)
		n.stats.superseded.Add(1)
		return errorf(protocol.CodeSuperseded, "a newer connection took this session")
	}
	n.log.Error("session write failed", zap.Uint64("conn", c.id), zap.Error(err))
	return errorf(protocol.CodeInternal, "could not write the session")
}

// handleAccount writes the user's account record. A write starts from the
// account as it shows now: once its until has passed, without the lapsed
// override, text, emoji and until.
func (n *Node) handleAccount(c *conn, req *protocol.Request) (any, *requestError) {
	if req.Override == nil && req.AuthoritativeDevice == nil && req.Text == nil && req.Emoji == nil && req.Until == nil {
		return nil, errorf(protocol.CodeBadRequest, "want override, text, emoji, until and/or authoritative_device")
	}
	var ov crdt.Override
	if req.Override != nil {
		o, err := crdt.ParseOverride(*req.Override)
		if err != nil {
			return nil, errorf(protocol.CodeBadRequest, "%v", err)
		}
		ov = o
	}
	if ad := req.AuthoritativeDevice; ad != nil && *ad != "" {
		if rerr := checkName("authoritative_device", *ad); rerr != nil {
			return nil, rerr
		}
	}
	if rerr := checkStatusText(req.Text, req.Emoji); rerr != nil {
		return nil, rerr
	}
	now := n.clock.Now()
	var until int64
	if req.Until != nil && *req.Until != "" {
		t, err := time.Parse(time.RFC3339Nano, *req.Until)
		if err != nil {
			return nil, errorf(protocol.CodeBadRequest, "until is not an RFC 3339 time: %q", truncate(*req.Until, 64))
		}
		if !t.After(now) {
			return nil, errorf(protocol.CodeBadRequest, "until %s is not in the future (the gateway's time is %s)", n.formatTime(t), n.formatTime(now))
		}
		until = t.UnixNano()
	}
	lk := lockOf(&n.mu)
	defer lk.unlock()
	s, rerr := n.ownedLocked(c)
	if rerr != nil {
		lk.unlock()
		return nil, rerr
	}
	cur, _ := n.replica.Account(s.user)
	cur = cur.Effective(now.UnixNano())
	if req.Override != nil {
		cur.Override = ov
	}
	if req.AuthoritativeDevice != nil {
		cur.AuthoritativeDevice = *req.AuthoritativeDevice
	}
	if req.Text != nil {
		cur.Text = *req.Text
	}
	if req.Emoji != nil {
		cur.Emoji = *req.Emoji
	}
	if req.Until != nil {
		cur.Until = until
	}
	d, err := n.replica.PutAccount(crdt.Account{
		User: s.user, Override: cur.Override, AuthoritativeDevice: cur.AuthoritativeDevice,
		Text: cur.Text, Emoji: cur.Emoji, Until: cur.Until,
	}, now.UnixNano())
	if err != nil {
		lk.unlock()
		n.log.Error("account write failed", zap.Error(err))
		return nil, errorf(protocol.CodeInternal, "could not write the account")
	}
	n.scheduleLapseLocked(s.user)
	n.markDirtyLocked(s.user)
	n.unlockAndPublish(&lk, []crdt.Delta{d})
	return protocol.OK{Op: protocol.OpOK, ID: req.ID}, nil
}

// handleBye ends the session cleanly; the connection closes after the ok.
func (n *Node) handleBye(c *conn, req *protocol.Request) *requestError {
	now := n.clock.Now()
	lk := lockOf(&n.mu)
	defer lk.unlock()
	if _, rerr := n.ownedLocked(c); rerr != nil {
		lk.unlock()
		return rerr
	}
	deltas, _ := n.endSessionLocked(c, crdt.StateDisconnected, now)
	n.dropSubsLocked(c)
	n.unlockAndPublish(&lk, deltas)
	n.stats.m.disconnected(reasonBye, 1)
	c.closeWith(encodeLine(protocol.OK{Op: protocol.OpOK, ID: req.ID}))
	return nil
}

// connLost runs when a connection's reader stops: a live session is
// disconnected at once, or held for Config.DisconnectGrace when the client
// dropped the connection (grace.go), and the connection is forgotten.
func (n *Node) connLost(c *conn) {
	n.endConnSession(c, true)
}

// endConnSession disconnects c's session if c still owns it, and the
// sessions it tracks, and drops its subscriptions; forget also removes c
// from the open connections. The
// writer calls it as soon as a closing error is queued, so a session never
// outlives the decision to close its connection, except while Drain holds
// the sessions (drain.go): then the session stays until a newer epoch
// elsewhere takes it over or the grace ends; and except when the client
// dropped the connection (forget, no close code): then it is held for
// Config.DisconnectGrace (grace.go).
func (n *Node) endConnSession(c *conn, forget bool) {
	now := n.clock.Now()
	lk := lockOf(&n.mu)
	defer lk.unlock()
	if _, open := n.conns[c]; forget && open {
		delete(n.conns, c)
		n.countConnLocked(c, false)
		n.stats.heartbeats.Add(c.heartbeats.Load()) // the reader, which counts them, has stopped
	}
	var deltas []crdt.Delta
	// While Drain holds the sessions, Drain writes it or a newer epoch
	// replaces it.
	holding := n.holding
	if !holding && !(forget && n.startGraceLocked(c, now)) {
		if ds, ok := n.endSessionLocked(c, crdt.StateDisconnected, now); ok {
			deltas = append(deltas, ds...)
			n.stats.m.disconnected(c.q.disconnectReason(), 1)
		}
	}
	tracking := !holding && c.tracks != nil && c.tracks.head != nil
	n.dropSubsLocked(c)
	n.unlockAndPublish(&lk, deltas)
	if tracking {
		// The sessions c tracks share its liveness: they end with it (no
		// disconnect grace: their client is the connection), on a
		// goroutine of their own, so that a backend's 100,000 do not hold
		// up the event loop's other connections. The caller holds connWG
		// for c (its reader side, or a writer's).
		reason := c.q.disconnectReason()
		n.connWG.Add(1)
		go func() {
			defer n.connWG.Done()
			n.endTracked(c, crdt.StateDisconnected, reason)
		}()
	}
}

// expireSession ends c's session if it has been silent for Timeout
// (expired), or if its token expired without a refresh (token_expired,
// written as a clean disconnect: the client did nothing wrong, its token
// ran out). nowMono is the sweeper's reading of Node.mono.
func (n *Node) expireSession(c *conn, nowMono int64) {
	now := n.clock.Now()
	lk := lockOf(&n.mu)
	defer lk.unlock()
	if _, rerr := n.ownedLocked(c); rerr != nil {
		lk.unlock()
		return
	}
	idle := crdt.ExpiryDeadline(c.lastActive.Load(), n.cfg.Timeout)
	if deadline := c.deadline(int64(n.cfg.Timeout)); !crdt.Expired(deadline, nowMono) {
		// A request (or a refresh) arrived after the sweeper looked.
		lk.unlock()
		n.wheel.add(c, deadline)
		return
	}
	if td := c.tokenDeadline.Load(); td != 0 && crdt.Expired(td, nowMono) && td < idle {
		deltas, _ := n.endSessionLocked(c, crdt.StateDisconnected, now)
		n.unlockAndPublish(&lk, deltas)
		n.stats.m.disconnected(codeIndex(protocol.CodeTokenExpired), sessionDeltas(deltas))
		n.stats.tokenExpired.Add(1)
		n.log.Debug("session token expired", zap.Uint64("conn", c.id))
		c.closeWithError(nil, protocol.CodeTokenExpired, "the session's token expired without a refresh; reconnect with a new token")
		return
	}
	deltas, _ := n.endSessionLocked(c, crdt.StateExpired, now)
	n.unlockAndPublish(&lk, deltas)
	n.endTracked(c, crdt.StateExpired, 0) // silent: every session it tracks expires with it
	n.stats.expired.Add(1)
	n.log.Debug("session expired", zap.Uint64("conn", c.id))
	c.closeWithError(nil, protocol.CodeExpired, "no request within "+n.cfg.Timeout.String())
}

// ownedLocked returns c's session if c still owns it.
func (n *Node) ownedLocked(c *conn) (*localSession, *requestError) {
	s := c.sess
	if s == nil {
		return nil, errorf(protocol.CodeNotAuthenticated, "send hello first")
	}
	if n.local[s.user][s.device] != c {
		if n.draining {
			return nil, errorf(protocol.CodeShuttingDown, "the gateway is shutting down")
		}
		return nil, errorf(protocol.CodeSuperseded, "this session has ended or was superseded")
	}
	return s, nil
}

// recordLocked returns the crdt record of c's session in state st, at
// clock time now: its last request, read on Node.mono, is taken back to
// the wall clock for the record's ExpiresAt.
func (n *Node) recordLocked(c *conn, st crdt.State, now time.Time) crdt.Session {
	s := c.sess
	lastActive := now.UnixNano() - (n.monoAt(now) - c.lastActive.Load())
	return crdt.OwnedSession{
		User: s.user, Device: s.device, ID: s.id, Epoch: s.epoch,
		Status: s.status, Groups: s.groups, Meta: s.meta, Info: s.info,
	}.Record(st, lastActive, n.cfg.Timeout)
}

// endSessionLocked writes c's session as ended (disconnected or expired)
// and forgets it, if c still owns it, and writes the time to the user's
// last-seen register. ok reports whether the session was written; ds are
// the deltas to publish, in write order: the session's, then the last
// seen's (sessionDeltas counts the sessions in a batch of them).
func (n *Node) endSessionLocked(c *conn, st crdt.State, now time.Time) (ds []crdt.Delta, ok bool) {
	if _, rerr := n.ownedLocked(c); rerr != nil {
		return nil, false
	}
	d, err := n.replica.PutLocal(n.recordLocked(c, st, now), now.UnixNano())
	n.unregisterLocked(c)
	if err != nil {
		if !errors.Is(err, crdt.ErrSuperseded) {
			n.log.Error("session end write failed", zap.Uint64("conn", c.id), zap.Error(err))
		}
		return nil, false
	}
	return n.appendLastSeenLocked(append(make([]crdt.Delta, 0, 2), d), c.sess.user, now), true
}

// appendLastSeenLocked writes now to user's last-seen register, when every
// member knows last-seen records, and appends the delta to ds.
func (n *Node) appendLastSeenLocked(ds []crdt.Delta, user string, now time.Time) []crdt.Delta {
	if !n.lastSeenReady() {
		return ds
	}
	ls, err := n.replica.PutLastSeen(user, now.UnixNano())
	if err != nil {
		n.log.Error("last seen write failed", zap.String("user", user), zap.Error(err))
		return ds
	}
	return append(ds, ls)
}

// sessionDeltas counts the session records among deltas.
func sessionDeltas(deltas []crdt.Delta) int {
	n := 0
	for i := range deltas {
		if deltas[i].Session != nil {
			n++
		}
	}
	return n
}

// registerLocked records c as the owner of its session.
func (n *Node) registerLocked(c *conn) {
	s := c.sess
	devs := n.local[s.user]
	if devs == nil {
		devs = make(map[string]*conn, 1)
		n.local[s.user] = devs
	}
	devs[s.device] = c
	n.localCount++
}

// unregisterLocked forgets that c owns its session (without a write) and
// marks its user dirty.
func (n *Node) unregisterLocked(c *conn) {
	s := c.sess
	devs := n.local[s.user]
	if devs[s.device] != c {
		return
	}
	delete(devs, s.device)
	if len(devs) == 0 {
		delete(n.local, s.user)
	}
	n.localCount--
	n.markDirtyLocked(s.user)
	n.signalHandoverLocked()
}

func randomHex(nbytes int) string {
	b := make([]byte, nbytes)
	rand.Read(b) //nolint:errcheck // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b)
}
