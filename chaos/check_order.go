package chaos

import (
	"fmt"
	"slices"
)

// Order: no gateway reports an older epoch of a (user, device) after a
// newer one, and no subscriber stream receives a version of a user lower
// than (or equal to: versions strictly increase within a stream) one it
// already had.
//
// "After" must be certain: within one stream, event order; across a
// gateway's connections, a get sent after another observation was
// received. An event's generation time is unknown (only that it precedes
// its receipt), so an event is compared with earlier observations of its
// own stream only. A restarted gateway is a new life with a fresh
// projection and is checked from scratch.

func (m *model) checkOrder() []Violation {
	var out []Violation
	type dk struct{ user, dev string }
	type seen struct {
		epoch uint64
		line  int
	}
	reported := map[string]bool{}
	report := func(key string, v Violation) {
		if !reported[key] {
			reported[key] = true
			out = append(out, v)
		}
	}
	// Within each stream.
	for _, gw := range m.gws {
		for _, s := range m.streams[gw] {
			versions := map[string]seen{}
			epochs := map[dk]seen{}
			for _, ev := range s.events {
				for u, p := range ev.byUser {
					if prev, ok := versions[u]; ok && p.Version <= prev.epoch {
						report(fmt.Sprintf("v/%d/%s", s.id, u), Violation{Kind: Order, At: ev.t, User: u,
							Msg: fmt.Sprintf("%s's stream c%d sent %s version %d after version %d",
								gw, s.id, u, p.Version, prev.epoch),
							Lines: uniq(ev.line, prev.line)})
					}
					versions[u] = seen{p.Version, ev.line}
					for _, si := range p.Sessions {
						k := dk{u, si.Device}
						if prev, ok := epochs[k]; ok && si.Epoch < prev.epoch {
							report(fmt.Sprintf("e/%d/%s/%s", s.id, u, si.Device), Violation{Kind: Order, At: ev.t, User: u,
								Msg: fmt.Sprintf("%s's stream c%d showed %s/%s epoch %d after epoch %d",
									gw, s.id, u, si.Device, si.Epoch, prev.epoch),
								Lines: uniq(ev.line, prev.line)})
						}
						if si.Epoch > epochs[k].epoch {
							epochs[k] = seen{si.Epoch, ev.line}
						}
					}
				}
			}
		}
	}
	// Across a gateway life's connections: each get against everything
	// received before it was sent.
	type item struct {
		at    float64
		check bool
		ob    *obsModel
	}
	lives := map[string][]item{}
	for _, ob := range m.obs {
		k := fmt.Sprintf("%s#%d", ob.gw, ob.life)
		lives[k] = append(lives[k], item{at: ob.t, ob: ob})
		if ob.src == "get" {
			lives[k] = append(lives[k], item{at: ob.sent, check: true, ob: ob})
		}
	}
	keys := make([]string, 0, len(lives))
	for k := range lives {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		items := lives[k]
		slices.SortStableFunc(items, func(a, b item) int {
			if c := cmpF(a.at, b.at); c != 0 {
				return c
			}
			// At the same instant a check comes first: "before" is strict.
			switch {
			case a.check && !b.check:
				return -1
			case b.check && !a.check:
				return 1
			}
			return 0
		})
		maxSeen := map[dk]seen{}
		for _, it := range items {
			for u, p := range it.ob.byUser {
				for _, si := range p.Sessions {
					dkey := dk{u, si.Device}
					prev := maxSeen[dkey]
					if it.check {
						if si.Epoch < prev.epoch {
							report(fmt.Sprintf("x/%s/%s/%s", k, u, si.Device), Violation{Kind: Order, At: it.ob.sent, User: u,
								Msg: fmt.Sprintf("%s (life %d) answered a get sent at %s with %s/%s epoch %d, after it had shown epoch %d",
									it.ob.gw, it.ob.life, fmtT(it.ob.sent), u, si.Device, si.Epoch, prev.epoch),
								Lines: uniq(it.ob.line, prev.line)})
						}
					} else if si.Epoch > prev.epoch {
						maxSeen[dkey] = seen{si.Epoch, it.ob.line}
					}
				}
			}
		}
	}
	return out
}
