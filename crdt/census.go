package crdt

// What a replica holds, counted for monitoring.

// NumStates is the number of session states: State values are below it.
const NumStates = int(maxStateEnum) + 1

// Census counts what a replica holds: its session records by owner and by
// the state its projection shows them in (an active record of a gateway
// marked down, or of a retired incarnation, counts as expired), tombstones
// included, and its users, accounts and origins.
type Census struct {
	// Local counts the records of sessions this replica's gateway owns
	// (its current and earlier incarnations), indexed by State.
	Local [NumStates]int
	// Remote counts the records of other gateways' sessions, by State.
	Remote [NumStates]int

	Users    int // users with session or account records
	Accounts int // account records
	Origins  int // gateway incarnations with records here
}

// Census returns the counts, kept up to date with every merge: O(1).
func (r *Replica) Census() Census {
	return Census{Local: r.census[0], Remote: r.census[1],
		Users: r.users, Accounts: len(r.accounts), Origins: len(r.originList)}
}

// censusCounts counts session records by owner (0: this replica's
// gateway, 1: others) and projected state.
type censusCounts [2][NumStates]int

// projected returns the census slot of a record: its owner and the state
// the projection shows it in (as view does).
func (r *Replica) projected(rec *record) (owner int, st State) {
	if !r.originList[rec.origin].node.self {
		owner = 1
	}
	st = rec.state
	if st == StateActive && !rec.counted {
		st = StateExpired
	}
	return owner, min(st, maxStateEnum)
}

// tally adds d to a record's census slot. Every change to a held record or
// to its counted flag is bracketed by tally(rec, -1) before and
// tally(rec, 1) after; CheckInvariants recounts.
func (r *Replica) tally(rec *record, d int) {
	o, st := r.projected(rec)
	r.census[o][st] += d
}

// recountCensus is the census computed by walking every record.
func (r *Replica) recountCensus() censusCounts {
	var c censusCounts
	r.recs.each(func(_ recID, rec *record) {
		o, st := r.projected(rec)
		c[o][st]++
	})
	return c
}

// WrittenAt returns when the delta's record was written, in Unix
// nanoseconds on its owner's clock: a session's Updated, an account's
// hybrid logical clock wall time, a last seen's At. It is 0 for an empty
// delta. A receiver
// subtracts it from its own clock to measure how long the write took to
// reach it (which includes the offset between the two clocks).
func (d *Delta) WrittenAt() int64 {
	switch {
	case d.Session != nil:
		return d.Session.Updated
	case d.Account != nil:
		return d.Account.Stamp.Wall
	case d.LastSeen != nil:
		return d.LastSeen.At // the end it records: when it was written, unless raised to a later one held
	}
	return 0
}
