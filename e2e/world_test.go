package e2e

// The drills' clients and what they observed: actors (a user's device that
// connects, changes status, reconnects), watchers (actors subscribed to
// every drill user, one per gateway), the log of every event the watchers
// received, and the expected presence of every user derived from the
// actors' own state.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rollcall/rollcall/auth"
	"github.com/rollcall/rollcall/chaos"
	"github.com/rollcall/rollcall/gossip"
	"github.com/rollcall/rollcall/protocol"
)

// world is the cluster and everything connected to it.
type world struct {
	c      *cluster
	secret []byte
	access access // set before the first connection, then static

	mu      sync.Mutex
	actors  []*actor          // drill users' devices, then the watchers
	addr    map[string]string // gateway -> client address
	http    map[string]string // gateway -> HTTP address
	cut     string            // the gateway cut off the gossip network, if any
	obs     []observation
	streams int
	bounds  chaos.Bounds
}

// observation is one event a watcher received.
type observation struct {
	at      time.Time
	watcher string // the watcher's user
	gateway string // the gateway the watcher was connected to
	stream  int    // one per watcher connection: versions increase within it
	p       protocol.Presence
}

// actor is one (user, device): connected to one gateway at a time.
type actor struct {
	w            *world
	user, device string
	watcher      bool // subscribes to every drill user

	mu     sync.Mutex
	c      *client // nil or ended while disconnected
	gw     string  // the gateway of c
	status string  // the device status last set
	epoch  uint64  // of the latest connection
	bye    bool    // said bye: offline on purpose
}

func (w *world) addActor(user, device string, watcher bool) *actor {
	a := &actor{w: w, user: user, device: device, watcher: watcher, status: "available"}
	w.mu.Lock()
	w.actors = append(w.actors, a)
	w.mu.Unlock()
	return a
}

// drillUsers returns the users the watchers follow and the views are
// checked for.
func (w *world) drillUsers() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var users []string
	for _, a := range w.actors {
		if !a.watcher && !slices.Contains(users, a.user) {
			users = append(users, a.user)
		}
	}
	return users
}

func (w *world) clientAddr(gw string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.addr[gw]
}

func (w *world) httpAddr(gw string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.http[gw]
}

func (w *world) members(ctx context.Context, gw string) ([]gossip.Member, error) {
	var ms []gossip.Member
	err := w.access.httpGet(ctx, gw, w.httpAddr(gw), "/v1/members", &ms)
	return ms, err
}

func (w *world) presence(ctx context.Context, gw, user string) (protocol.Presence, error) {
	var p protocol.Presence
	err := w.access.httpGet(ctx, gw, w.httpAddr(gw), "/v1/presence/"+user, &p)
	return p, err
}

// refreshAddrs reads a gateway's addresses again (after its container
// started).
func (w *world) refreshAddrs(ctx context.Context, gw string) error {
	ca, ha, err := w.c.addrs(ctx, gw)
	if err != nil {
		return err
	}
	w.mu.Lock()
	w.addr[gw], w.http[gw] = ca, ha
	w.mu.Unlock()
	return nil
}

// observe records a watcher's event.
func (w *world) observe(watcher, gw string, stream int, p protocol.Presence) {
	w.mu.Lock()
	w.obs = append(w.obs, observation{at: time.Now(), watcher: watcher, gateway: gw, stream: stream, p: p})
	w.mu.Unlock()
}

// mark returns the position in the observation log from which a phase's
// observations start.
func (w *world) mark() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.obs)
}

// since returns the observations from position m on.
func (w *world) since(m int) []observation {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.obs[m:])
}

// connect opens a's session on gw, with last_epoch from its previous
// connection, its status and, for a watcher, a subscription to every
// drill user.
func (a *actor) connect(ctx context.Context, gw string) error {
	// A watcher subscribes to every drill user: its token is a backend
	// token (may read everyone); the others carry the default grants.
	signer, err := auth.NewSecretSigner(a.w.secret)
	if err != nil {
		return err
	}
	spec := auth.TokenSpec{User: a.user, TTL: time.Hour}
	if a.watcher {
		spec.Grants = &auth.GrantsClaim{Backend: true}
	}
	tok, err := signer.Sign(spec, time.Now())
	if err != nil {
		return err
	}
	a.mu.Lock()
	h := protocol.Request{User: a.user, Device: a.device, Token: tok, Status: a.status, LastEpoch: a.epoch}
	a.mu.Unlock()
	var onEvent func(protocol.Presence)
	if a.watcher {
		a.w.mu.Lock()
		a.w.streams++
		stream := a.w.streams
		a.w.mu.Unlock()
		onEvent = func(p protocol.Presence) { a.w.observe(a.user, gw, stream, p) }
	}
	c, err := dial(ctx, a.w.clientAddr(gw), a.w.access.tlsFor(gw), h, onEvent)
	if err != nil {
		return err
	}
	if c.welcome.Epoch <= h.LastEpoch {
		c.close()
		return fmt.Errorf("%s/%s: epoch %d at %s is not above last_epoch %d", a.user, a.device, c.welcome.Epoch, gw, h.LastEpoch)
	}
	a.mu.Lock()
	a.c, a.gw, a.epoch, a.bye = c, gw, c.welcome.Epoch, false
	a.mu.Unlock()
	if a.watcher {
		if err := c.request(protocol.Request{Op: protocol.OpSub, Users: a.w.drillUsers()}); err != nil {
			return fmt.Errorf("%s sub at %s: %w", a.user, gw, err)
		}
	}
	return nil
}

// connectRetry connects a to gw, retrying until ctx ends (a gateway that
// has just started may not listen yet).
func (a *actor) connectRetry(ctx context.Context, gw string) error {
	for {
		err := a.connect(ctx, gw)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("connect %s/%s to %s: %w (last: %v)", a.user, a.device, gw, ctx.Err(), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (a *actor) lastEpoch() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.epoch
}

func (a *actor) conn() *client {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.c
}

// at returns the gateway a is connected to, or "" while it is not.
func (a *actor) at() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.c == nil || a.c.end() != "" {
		return ""
	}
	return a.gw
}

func (a *actor) setStatus(status string) error {
	if err := a.conn().request(protocol.Request{Op: protocol.OpStatus, Status: status}); err != nil {
		return fmt.Errorf("%s/%s status %s: %w", a.user, a.device, status, err)
	}
	a.mu.Lock()
	a.status = status
	a.mu.Unlock()
	return nil
}

func (a *actor) sayBye() error {
	c := a.conn()
	if err := c.request(protocol.Request{Op: protocol.OpBye}); err != nil {
		return fmt.Errorf("%s/%s bye: %w", a.user, a.device, err)
	}
	<-c.done
	a.mu.Lock()
	a.bye = true
	a.mu.Unlock()
	return nil
}

// reachable reports whether gateway viewer can hear gateway owner.
func (w *world) reachableLocked(viewer, owner string) bool {
	return viewer == owner || (viewer != w.cut && owner != w.cut)
}

// expected returns what gateway viewer must show for user: the sessions of
// the user's connected actors on gateways it can reach, as
// "device@gateway status epoch", sorted, and the aggregate status.
func (w *world) expected(viewer, user string) (sessions []string, status string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	allAway := true
	for _, a := range w.actors {
		if a.user != user {
			continue
		}
		gw := a.at()
		if gw == "" || !w.reachableLocked(viewer, gw) {
			continue
		}
		a.mu.Lock()
		sessions = append(sessions, fmt.Sprintf("%s@%s %s %d", a.device, gw, a.status, a.epoch))
		allAway = allAway && a.status == "away"
		a.mu.Unlock()
	}
	slices.Sort(sessions)
	switch {
	case len(sessions) == 0:
		return nil, "offline"
	case allAway:
		return sessions, "away"
	}
	return sessions, "available"
}

func shown(p protocol.Presence) (sessions []string, status string) {
	for _, s := range p.Sessions {
		sessions = append(sessions, fmt.Sprintf("%s@%s %s %d", s.Device, s.Gateway, s.Status, s.Epoch))
	}
	slices.Sort(sessions)
	return sessions, p.Status
}

// checkView compares what gateway viewer answers on /v1/presence for every
// drill user with what it must show; nil when all match.
func (w *world) checkView(ctx context.Context, viewer string) error {
	var bad []string
	for _, u := range w.drillUsers() {
		p, err := w.presence(ctx, viewer, u)
		if err != nil {
			return fmt.Errorf("%s: %w", viewer, err)
		}
		gotS, gotSt := shown(p)
		wantS, wantSt := w.expected(viewer, u)
		if gotSt != wantSt || !slices.Equal(gotS, wantS) || p.Online != (wantSt != "offline") {
			bad = append(bad, fmt.Sprintf("%s: %s %q, want %s %q", u, gotSt, gotS, wantSt, wantS))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%s shows %s", viewer, strings.Join(bad, "; "))
	}
	return nil
}

// checkViews checks every gateway's view.
func (w *world) checkViews(ctx context.Context, viewers ...string) error {
	for _, v := range viewers {
		if err := w.checkView(ctx, v); err != nil {
			return err
		}
	}
	return nil
}

// waitFor polls cond every 100ms until it returns nil or within has passed
// since from; it returns how long after from cond first held, or cond's
// last error.
func waitFor(ctx context.Context, from time.Time, within time.Duration, cond func() error) (time.Duration, error) {
	for {
		err := cond()
		if err == nil {
			return time.Since(from), nil
		}
		if time.Since(from) > within {
			return time.Since(from), fmt.Errorf("not within %v: %w", within, err)
		}
		select {
		case <-ctx.Done():
			return time.Since(from), ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// firstOffline returns, for each (watcher gateway, user), when a watcher
// connected to that gateway first saw user offline in obs.
func firstOffline(obs []observation) map[[2]string]time.Time {
	out := map[[2]string]time.Time{}
	for _, o := range obs {
		k := [2]string{o.gateway, o.p.User}
		if _, ok := out[k]; !ok && !o.p.Online {
			out[k] = o.at
		}
	}
	return out
}

// offlines returns the observations in obs of users shown offline for
// which allowed says no.
func offlines(obs []observation, allowed func(o observation) bool) []string {
	var bad []string
	for _, o := range obs {
		if !o.p.Online && !allowed(o) {
			bad = append(bad, fmt.Sprintf("%s (watching on %s) saw %s offline at %s",
				o.watcher, o.gateway, o.p.User, o.at.Format("15:04:05.000")))
		}
	}
	return bad
}

// orderBroken returns the events whose version is not above the previous
// one of the same user in the same stream (the order promise).
func orderBroken(obs []observation) []string {
	last := map[[2]any]uint64{}
	var bad []string
	for _, o := range obs {
		k := [2]any{o.stream, o.p.User}
		if v, ok := last[k]; ok && o.p.Version <= v {
			bad = append(bad, fmt.Sprintf("%s on %s: %s version %d after %d", o.watcher, o.gateway, o.p.User, o.p.Version, v))
		}
		last[k] = o.p.Version
	}
	return bad
}
