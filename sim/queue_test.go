package sim

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/hashicorp/memberlist"

	"github.com/rollcall/rollcall/gossip"
)

// TestBQueueMatchesMemberlist drives the simulator's queue and memberlist's
// TransmitLimitedQueue with the same random operations (named and unique
// broadcasts of random sizes, GetBroadcasts with random limits and
// overheads while the cluster size changes, Prune) and requires the same
// broadcasts, in the same order, and the same queue length after every
// operation.
func TestBQueueMatchesMemberlist(t *testing.T) {
	for seed := range uint64(300) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { compareQueues(t, seed) })
	}
}

func compareQueues(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	mult := 1 + rng.IntN(4)
	numNodes := 1 + rng.IntN(20000)
	real := &memberlist.TransmitLimitedQueue{NumNodes: func() int { return numNodes }, RetransmitMult: mult}
	model := newBQueue(mult, 40, nil)
	names := 1 + rng.IntN(40)
	maxSize := 4 + rng.IntN(600)
	// Equal sizes make ties on length, so the id order is exercised.
	sizes := []int{4 + rng.IntN(maxSize), 4 + rng.IntN(maxSize), 4 + rng.IntN(maxSize)}
	var out []uint32
	var scratch qscratch
	ops := 200 + rng.IntN(2000)
	queued := false
	// A node's Rollcall queue holds delta batches and alive announcements
	// named "alive/NODE"; its memberlist queue holds messages named NODE.
	rcQueue := seed%2 == 0
	// One seed in four queues faster than it sends and prunes less, as a
	// node does in a burst: its queue grows to hundreds of items and its
	// buckets move and grow within and between buffers.
	queueShare, maxKeep := 55, 64
	if seed%4 == 3 {
		queueShare, maxKeep, ops = 80, 4096, 4*ops
	}
	for op := range ops {
		switch x := rng.IntN(100); {
		case x < queueShare:
			queued = true
			ref := uint32(op)
			size := sizes[rng.IntN(len(sizes))]
			if rng.IntN(3) == 0 {
				size = 4 + rng.IntN(maxSize)
			}
			msg := make([]byte, size)
			binary.LittleEndian.PutUint32(msg, ref)
			switch name := int32(rng.IntN(names)); {
			case rng.IntN(4) != 0:
				real.QueueBroadcast(gossip.NewBroadcast(msg, ""))
				model.queue(ref, size, noName)
			case rcQueue:
				real.QueueBroadcast(gossip.NewBroadcast(msg, fmt.Sprint("alive/", name)))
				model.queue(ref, size, name)
			default:
				real.QueueBroadcast(&mlBroadcast{node: fmt.Sprint(name), msg: msg})
				model.queue(ref, size, name)
			}
		case x < queueShare+(92-55)*(100-queueShare)/45:
			if rng.IntN(10) == 0 {
				numNodes = 1 + rng.IntN(20000)
			}
			overhead := 2 + rng.IntN(2)
			limit := rng.IntN(1500)
			if rng.IntN(20) == 0 {
				limit = 1 << 40
			}
			var want []uint32
			for _, b := range real.GetBroadcasts(overhead, limit) {
				want = append(want, binary.LittleEndian.Uint32(b))
			}
			out = model.getBroadcasts(overhead, limit, numNodes, out[:0], &scratch)
			if !slices.Equal(want, out) && !(len(want) == 0 && len(out) == 0) {
				t.Fatalf("op %d: GetBroadcasts(%d, %d) = %v, memberlist's %v", op, overhead, limit, out, want)
			}
		default:
			if !queued {
				continue // memberlist's Prune needs a queue that was used
			}
			keep := rng.IntN(maxKeep)
			real.Prune(keep)
			model.prune(keep)
		}
		if got, want := model.numQueued(), real.NumQueued(); got != want {
			t.Fatalf("op %d: %d queued, memberlist %d", op, got, want)
		}
	}
}

// The Rollcall broadcasts are gossip's own (gossip.NewBroadcast): delta
// batches that invalidate nothing, alive announcements that replace the
// older one of the same name. memberlist's own alive, suspect and dead
// messages are modelled by mlBroadcast.

// mlBroadcast is a memberlist alive, suspect or dead message in a node's
// memberlist queue; like memberlist's own, it replaces any older message
// about the same node.
type mlBroadcast struct {
	node string
	msg  []byte
}

var _ memberlist.NamedBroadcast = (*mlBroadcast)(nil)

func (b *mlBroadcast) Invalidates(other memberlist.Broadcast) bool {
	o, ok := other.(*mlBroadcast)
	return ok && o.node == b.node
}
func (b *mlBroadcast) Name() string    { return b.node }
func (b *mlBroadcast) Message() []byte { return b.msg }
func (b *mlBroadcast) Finished()       {}

// TestQBucketDeque drives one bucket with inserts and removals at random
// positions, biased to the ends as the queue's are, and with blocks put at
// either end, and requires the same items as a plain slice after every
// operation, through the moves within its buffer and into larger or
// smaller ones from a shared pool.
func TestQBucketDeque(t *testing.T) {
	pool := new(qpool)
	for seed := range uint64(50) {
		rng := rand.New(rand.NewPCG(seed, 11))
		buf := pool.get(minBucketCap)
		b := qbucket{lo: minBucketCap / 2, hi: minBucketCap / 2, buf: buf}
		var want []qent
		for op := range 5000 {
			n := len(want)
			pos := func() int {
				switch rng.IntN(4) {
				case 0:
					return 0
				case 1:
					return n
				}
				return rng.IntN(n + 1)
			}
			if x := rng.IntN(10); x < 2 {
				// A block, at the front or the back, as GetBroadcasts
				// moves a bucket's newest items a tier up.
				blk := make([]qent, 1+rng.IntN(20))
				for j := range blk {
					blk[j] = qent{id: int64(op), ref: uint32(j)}
				}
				front := x == 0
				b.insertBlock(front, blk, pool)
				if front {
					want = append(slices.Clone(blk), want...)
				} else {
					want = append(want, blk...)
				}
			} else if n == 0 || rng.IntN(100) < 60-int(seed%3)*15 {
				i := pos()
				e := qent{id: int64(op), ref: uint32(op)}
				b.insert(i, e, pool)
				want = slices.Insert(want, i, e)
			} else {
				i := min(pos(), n-1)
				b.remove(i, pool)
				want = slices.Delete(want, i, i+1)
			}
			if !slices.Equal(b.items(), want) {
				t.Fatalf("seed %d op %d: bucket %v, want %v", seed, op, b.items(), want)
			}
			if b.lo < 0 || int(b.hi) > len(b.buf) || len(b.buf)&(len(b.buf)-1) != 0 {
				t.Fatalf("seed %d op %d: lo %d hi %d in a buffer of %d", seed, op, b.lo, b.hi, len(b.buf))
			}
		}
		pool.put(b.buf)
	}
}
