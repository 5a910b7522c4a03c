package crdt

import (
	"slices"
	"strings"
)

// Key identifies the session slot of one device of one user. At most one
// record per Key is live in a replica.
type Key struct {
	User   string
	Device string
}

func (k Key) String() string { return k.User + "/" + k.Device }

// Session is one session record. Only its origin writes it; every other
// replica merges it. Times are Unix nanoseconds on the owner's clock.
type Session struct {
	User    string
	Device  string
	ID      string // session id, unique per connection
	Epoch   uint64 // per (User, Device); strictly greater on every reconnect
	Seq     uint64 // grows with each change the owner makes within one epoch
	Gateway string // owner node name, for routing
	State   State
	Status  Status
	Groups  []string // sorted, no duplicates
	// ExpiresAt is the owner's deadline for the next heartbeat. Heartbeats
	// refresh it locally without a write, so remote copies show the deadline
	// as of the owner's last write.
	ExpiresAt int64
	Updated   int64 // when the owner made this write
	// Meta is the session's own data, set by its client: a compact JSON
	// object of at most MaxMetaBytes, or empty for none. Info is
	// what the session's token vouches for (its rollcall.info claim), as
	// compact JSON of at most MaxInfoBytes, or empty.
	Meta string
	Info string

	Origin  Origin // owning gateway incarnation
	Version uint64 // the origin's write counter at this write
}

// Key returns the session's slot.
func (s *Session) Key() Key { return Key{User: s.User, Device: s.Device} }

// InGroup reports whether the session has joined group g.
func (s *Session) InGroup(g string) bool {
	_, ok := slices.BinarySearch(s.Groups, g)
	return ok
}

// Clone returns a deep copy of s.
func (s *Session) Clone() *Session {
	c := *s
	c.Groups = slices.Clone(s.Groups)
	return &c
}

// NormalizeGroups sorts groups and removes duplicates and empty names, in
// place, and returns the result.
func NormalizeGroups(groups []string) []string {
	groups = slices.DeleteFunc(groups, func(g string) bool { return g == "" })
	slices.Sort(groups)
	return slices.Compact(groups)
}

// CompareSessions orders two records of the same Key: the merge keeps the
// greater. The order is total over distinct writes, so every replica picks the
// same winner regardless of delivery order:
//
//  1. higher Epoch wins (a reconnect always beats an older connection);
//  2. within one epoch a terminal record beats an active one, so a delayed
//     active write never revives an ended epoch;
//  3. higher Seq wins (the owner's later write within the epoch);
//  4. ties, possible only when two gateways issued the same epoch, are broken
//     by Gateway, then session ID, then Origin and Version.
func CompareSessions(a, b *Session) int {
	if a.Epoch != b.Epoch {
		return cmpU64(a.Epoch, b.Epoch)
	}
	if at, bt := a.State.Terminal(), b.State.Terminal(); at != bt {
		if at {
			return 1
		}
		return -1
	}
	if a.Seq != b.Seq {
		return cmpU64(a.Seq, b.Seq)
	}
	if c := strings.Compare(a.Gateway, b.Gateway); c != 0 {
		return c
	}
	if c := strings.Compare(a.ID, b.ID); c != 0 {
		return c
	}
	if a.Origin != b.Origin {
		if a.Origin.less(b.Origin) {
			return -1
		}
		return 1
	}
	return cmpU64(a.Version, b.Version)
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
