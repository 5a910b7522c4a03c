package crdt

import (
	"errors"
	"time"
)

// Config configures a Replica. The zero value of every field but Self takes
// the default noted beside it.
type Config struct {
	// Self is the origin this replica writes as. Its Node must be set;
	// Incarnation should grow on every restart (a boot timestamp is usual).
	Self Origin

	// TombstoneHorizon is how long an ended session stays as a tombstone,
	// counted from when this replica saw it end, before GC removes it. It
	// must exceed the longest a late delta can still arrive (the anti-entropy
	// interval times a safety factor). A peer whose digest lags further than
	// this is repaired by a full snapshot. Default 10m.
	TombstoneHorizon time.Duration

	// PurgeHorizon is how long the sessions of a node marked down stay in
	// the projection (shown expired) before GC purges them. Default 30m.
	PurgeHorizon time.Duration

	// MaxPendingRanges bounds, per origin, the runs of writes held above
	// the watermark (received out of order; adjacent runs merge). Digests
	// carry them so a peer sends only what is missing. Past the bound the
	// highest runs are forgotten and anti-entropy resends them. 16 bytes a
	// run. Default 16384.
	MaxPendingRanges int

	// MaxTombstonesPerUser bounds the tombstones held for one user: past
	// it the oldest is collected at once, as GC would at the horizon, its
	// epoch kept as the key's floor (usertombstones.go). Default 256;
	// negative means no bound.
	MaxTombstonesPerUser int

	// LastSeenRetention is how long a user's last-seen register is kept
	// after its time (lastseen.go): a write older than that is collected
	// by GC and never taken again. Default 30 days (720h).
	LastSeenRetention time.Duration
}

// Defaults for Config.
const (
	DefaultTombstoneHorizon = 10 * time.Minute
	DefaultPurgeHorizon     = 30 * time.Minute
	DefaultMaxPendingRanges = 16384
	// DefaultMaxTombstonesPerUser is far more devices than a user ends
	// sessions on within a tombstone horizon, few enough that a user's
	// queries stay cheap whatever a client does.
	DefaultMaxTombstonesPerUser = 256
	// DefaultLastSeenRetention keeps "last seen a month ago".
	DefaultLastSeenRetention = 30 * 24 * time.Hour
)

// Validate fills defaults and rejects contradictions.
func (c *Config) Validate() error {
	if c.Self.Node == "" {
		return errors.New("crdt: Config.Self.Node is required")
	}
	if c.TombstoneHorizon == 0 {
		c.TombstoneHorizon = DefaultTombstoneHorizon
	}
	if c.PurgeHorizon == 0 {
		c.PurgeHorizon = DefaultPurgeHorizon
	}
	if c.MaxPendingRanges == 0 {
		c.MaxPendingRanges = DefaultMaxPendingRanges
	}
	if c.MaxTombstonesPerUser == 0 {
		c.MaxTombstonesPerUser = DefaultMaxTombstonesPerUser
	}
	if c.LastSeenRetention == 0 {
		c.LastSeenRetention = DefaultLastSeenRetention
	}
	if c.TombstoneHorizon < 0 || c.PurgeHorizon < 0 || c.MaxPendingRanges < 0 || c.LastSeenRetention < 0 {
		return errors.New("crdt: horizons and limits must not be negative")
	}
	return nil
}
