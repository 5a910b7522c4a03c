package node

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/rollcall/rollcall/crdt"
	"github.com/rollcall/rollcall/webhook"
)

// Webhooks (docs/webhooks.md): every gateway follows every user's presence
// and decides, at each event flush, what webhook event a change makes
// (webhook.Decide); the user's notifier among the live gateways
// (webhook.Handoff) sends it, the others keep it for a while
// (webhook.Shadow) and send it themselves if the notifier leaves their view
// meanwhile. A gateway sends nothing until its cluster reports it ready:
// until then its replica is catching up, and its changes are old news.
//
// The membership view is read at each flush and every
// webhookWatchInterval, outside mu (the Cluster is never called with mu
// held).

// webhookWatchInterval is how often the live gateways are read when no
// change flushes: how soon a failed notifier's events are sent again.
const webhookWatchInterval = 500 * time.Millisecond

// LiveGatewayLister is implemented by a Cluster that knows which gateways
// are alive; each user's webhooks are sent by one of them
// (webhook.Notifier). LiveGateways returns the names of the members that
// are alive, have not announced a leave, and whose sessions this node
// shows (a member stops counting no later than its sessions are shown
// expired), this node included. It must be cheap and must not call back
// into the Node. Without it a node counts itself alone: in a cluster, every
// gateway would send every event.
type LiveGatewayLister interface {
	LiveGateways() []string
}

// RegionLocator is implemented by a Cluster that bridges regions
// (gossip.Cluster does). OtherRegion reports whether gateway is of another
// region: a webhook event whose change a gateway of another region made
// is that region's to send (docs/webhooks.md, "Across regions"), so that
// each region's notifiers do not all send it. It is called with the
// node's lock held: it must take no lock but a leaf one of its own, and
// never call back into the Node.
type RegionLocator interface {
	OtherRegion(gateway string) bool
}

// webhooks is a node's webhook state; nil when Config.Webhook has no URLs.
type webhooks struct {
	// Static after New.
	cfg    webhook.Config
	sender *webhook.Sender

	// Guarded by Node.mu.
	last map[string]webhook.Last // what this node last saw of each online user (and of those a failed gateway's end left offline)

	// Guarded by mu, which is taken after Node.mu, never before.
	mu       sync.Mutex
	ready    bool // the cluster reported ready; the handoff has its first view
	handoff  webhook.Handoff
	shadow   *webhook.Shadow
	events   uint64 // events this node queued as their notifier
	replayed uint64 // events queued again for a notifier that left the view
	// otherRegion counts the events this node, their notifier, left to
	// the region where their change was made
	otherRegion uint64
}

// WebhookStats describes a node's webhooks (GET /metrics); zero when off.
type WebhookStats struct {
	webhook.Stats
	// Events counts the events this gateway sent as their notifier
	// (each to every URL); Replayed those it sent again because their
	// notifier left its view within the handoff window.
	Events   uint64
	Replayed uint64
	// OtherRegion counts the events this gateway, their notifier in its
	// region, did not send because their change was made in another
	// region (which sends them).
	OtherRegion uint64
	// ShadowOverwritten counts the events kept for another notifier that
	// were pushed out of the shadow within the window.
	ShadowOverwritten uint64
	// Ready is true once the node sends (its cluster reported ready);
	// Settled while no earlier membership view counts (each user has one
	// notifier in this node's view).
	Ready, Settled bool
}

func newWebhooks(cfg Config, log *zap.Logger) (*webhooks, error) {
	wc := cfg.Webhook
	wc.Gateway = cfg.Name
	wc.Report = func(url string, ev *webhook.Event, attempts int, err error) {
		log.Warn("webhook given up", zap.String("url", url), zap.String("id", ev.ID), zap.Stringer("type", ev.Type),
			zap.Int("attempts", attempts), zap.Error(err))
	}
	s, err := webhook.NewSender(wc)
	if err != nil {
		return nil, err
	}
	return &webhooks{
		cfg:     wc,
		sender:  s,
		last:    make(map[string]webhook.Last),
		handoff: webhook.Handoff{Self: cfg.Name, Window: wc.Handoff},
		shadow:  webhook.NewShadow(wc.ShadowSize, wc.Handoff),
	}, nil
}

// startWebhooks starts the sender and the membership watch. Part of Start.
func (n *Node) startWebhooks() {
	if n.hooks == nil {
		return
	}
	n.hooks.sender.Start()
	n.loops.Add(1)
	go func() {
		defer n.loops.Done()
		t := time.NewTicker(webhookWatchInterval)
		defer t.Stop()
		for {
			select {
			case <-n.done:
				return
			case <-t.C:
				n.watchWebhookMembers()
			}
		}
	}()
}

// watchWebhookMembers reads the live gateways into the handoff, and
// queues again the events kept for a notifier that left. It takes no
// lock of the node's; the Cluster is called without any held.
func (n *Node) watchWebhookMembers() {
	h := n.hooks
	if !n.clusterReady() {
		return
	}
	var members []string
	if l, ok := n.getCluster().(LiveGatewayLister); ok {
		members = l.LiveGateways()
	}
	now := n.clock.Now().UnixNano()
	h.mu.Lock()
	removed := h.handoff.Observe(members, now)
	h.ready = true
	replay := h.shadow.Take(removed, now, func(u string) bool { return h.handoff.Notifier(u) == n.cfg.Name })
	h.replayed += uint64(len(replay))
	h.mu.Unlock()
	for _, ev := range replay {
		h.sender.Enqueue(ev)
	}
	if len(removed) > 0 {
		n.log.Info("webhook notifiers left the view; their recent events are sent again by their users' new notifiers",
			zap.Strings("gateways", removed), zap.Int("replayed", len(replay)))
	}
}

// clusterReady reports whether the cluster (if any) has caught up.
func (n *Node) clusterReady() bool {
	if r, ok := n.getCluster().(ReadinessReporter); ok {
		ready, _ := r.Readiness()
		return ready
	}
	return true
}

// decideWebhookLocked decides the webhook event of user p.User's change to
// p, remembers p, and appends the event to out when this node is to send
// it. The caller holds n.mu.
func (n *Node) decideWebhookLocked(p crdt.Presence, now int64, out []*webhook.Event) []*webhook.Event {
	h := n.hooks
	u := p.User
	ob := webhook.Observation{Presence: p, Records: n.replica.UserSessions(u), Now: now,
		GatewayDown: func(g string) bool { _, down := n.replica.NodeDown(g); return down }}
	if a, ok := n.replica.Account(u); ok {
		ob.Account = &a
	}
	ev, next := webhook.Decide(h.last[u], ob)
	if next.Online || next.Opened.Session != "" {
		h.last[u] = next
	} else {
		delete(h.last, u)
	}
	if ev == nil || !h.cfg.Events.Has(ev.Type) {
		return out
	}
	other := false
	if l, ok := n.getCluster().(RegionLocator); ok && ev.Gateway != "" {
		other = l.OtherRegion(ev.Gateway)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case !h.ready:
	case other:
		// Another region's change: its own notifier sends it, and no
		// gateway here sends it again should this user's notifier fail.
		if h.handoff.Responsible(u, now) {
			h.otherRegion++
		}
	case h.handoff.Responsible(u, now):
		h.events++
		out = append(out, ev)
	default:
		h.shadow.Add(ev, h.handoff.Notifier(u), now)
	}
	return out
}

// sendWebhooks queues the events a flush decided to send.
func (n *Node) sendWebhooks(evs []*webhook.Event) {
	for _, ev := range evs {
		n.hooks.sender.Enqueue(ev)
	}
}

// drainWebhooks decides the changes a drain just wrote and waits, within
// ctx, until the queue is delivered. Part of Drain.
func (n *Node) drainWebhooks(ctx context.Context) {
	if n.hooks == nil {
		return
	}
	n.flushEvents()
	if err := n.hooks.sender.Flush(ctx); err != nil {
		n.log.Warn("webhooks still queued at the end of the drain", zap.Int("deliveries", n.hooks.sender.Stats().Queued))
	}
}

// closeWebhooks stops the sender at once. Part of Close.
func (n *Node) closeWebhooks() {
	if n.hooks != nil {
		n.hooks.sender.Close()
	}
}

// WebhookStats returns the webhook counters; zero when webhooks are off.
func (n *Node) WebhookStats() WebhookStats {
	h := n.hooks
	if h == nil {
		return WebhookStats{}
	}
	st := WebhookStats{Stats: h.sender.Stats()}
	h.mu.Lock()
	defer h.mu.Unlock()
	st.Events, st.Replayed, st.ShadowOverwritten, st.OtherRegion = h.events, h.replayed, h.shadow.Overwritten, h.otherRegion
	st.Ready, st.Settled = h.ready, h.ready && h.handoff.Settled(n.clock.Now().UnixNano())
	return st
}
