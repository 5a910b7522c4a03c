package crdt

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

// Benchmarks. The large ones (1M records) are skipped under -short; none of
// them runs under plain `go test` (only with -bench).
//
//	go test -run '^$' -bench . -benchmem ./crdt

const benchGroups = 1000 // distinct group names; each session joins two

// benchDeltas returns n remote session deltas written by `gateways`
// gateways, spread round-robin over them: one connect per (user, device),
// users with 4 devices each. They go through the codec, so every record owns
// its strings as a received one would.
func benchDeltas(tb testing.TB, n, gateways int) []Delta {
	tb.Helper()
	writers := make([]*Replica, gateways)
	for i := range writers {
		writers[i] = newTestReplica(tb, fmt.Sprintf("gw%02d", i), 1, Config{})
	}
	out := make([]Delta, 0, n)
	batch := make([]Delta, 0, 4096)
	flush := func() {
		ds, err := DecodeDeltas(must(AppendDeltas(nil, batch)))
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, ds...)
		batch = batch[:0]
	}
	for i := range n {
		s := Session{
			User: fmt.Sprintf("user%07d", i/4), Device: fmt.Sprintf("dev%d", i%4),
			ID: fmt.Sprintf("sess%08d", i), Epoch: 1, State: StateActive,
			Groups:    []string{fmt.Sprintf("group%04d", i%benchGroups), fmt.Sprintf("group%04d", (i*7+3)%benchGroups)},
			ExpiresAt: int64(time.Minute),
		}
		d, err := writers[i%gateways].PutLocal(s, 1)
		if err != nil {
			tb.Fatal(err)
		}
		batch = append(batch, d)
		if len(batch) == cap(batch) {
			flush()
		}
	}
	if len(batch) > 0 {
		flush()
	}
	return out
}

// statusChanges returns, for each connect delta, the same session's next
// write (a status change) as its gateway would send it.
func statusChanges(ds []Delta) []Delta {
	out := make([]Delta, len(ds))
	for i, d := range ds {
		s := d.Session.Clone()
		s.Seq++
		s.Status = StatusAway
		s.Version += uint64(len(ds)) // after every connect of its origin
		out[i] = Delta{Since: s.Version - 1, Session: s}
	}
	return out
}

// BenchmarkApply measures merges of remote deltas into a replica: new
// sessions, later writes of held sessions, and duplicates (ignored by the
// watermark).
//
// The replica has answered a group query, so its group index is built and
// every merge maintains it, as on a gateway whose clients use groups; the
// connect-no-groups case is a replica that was never asked one (the
// simulator's).
func BenchmarkApply(b *testing.B) {
	const pool = 1 << 17
	connects := benchDeltas(b, pool, 8)
	updates := statusChanges(connects)
	groupQuery := true
	run := func(b *testing.B, prepare func(r *Replica), ds []Delta) {
		b.ReportAllocs()
		var r *Replica
		reset := func() {
			r = newTestReplica(b, "observer", 1, Config{})
			if groupQuery {
				r.GroupOnlineCount("g") // builds the group index
			}
			prepare(r)
		}
		reset()
		b.ResetTimer()
		for i := range b.N {
			if i%len(ds) == 0 && i > 0 {
				b.StopTimer()
				reset()
				b.StartTimer()
			}
			if _, _, err := r.Apply(ds[i%len(ds)], 1); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "merges/s")
	}
	applyAll := func(ds []Delta) func(r *Replica) {
		return func(r *Replica) {
			for _, d := range ds {
				if _, _, err := r.Apply(d, 1); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	b.Run("connect", func(b *testing.B) { run(b, func(*Replica) {}, connects) })
	b.Run("status-change", func(b *testing.B) { run(b, applyAll(connects), updates) })
	b.Run("duplicate", func(b *testing.B) { run(b, applyAll(connects), connects) })
	groupQuery = false
	b.Run("connect-no-groups", func(b *testing.B) { run(b, func(*Replica) {}, connects) })
}

// BenchmarkCodec measures encoding and decoding a batch of 64 session
// deltas, and reports the wire size per delta.
func BenchmarkCodec(b *testing.B) {
	const batch = 64
	ds := benchDeltas(b, batch, 4)
	wire := must(AppendDeltas(nil, ds))
	perDelta := float64(len(wire)) / batch
	b.Run("encode", func(b *testing.B) {
		b.ReportAllocs()
		buf := make([]byte, 0, 2*len(wire))
		for range b.N {
			var err error
			if buf, err = AppendDeltas(buf[:0], ds); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/delta")
		b.ReportMetric(perDelta, "bytes/delta")
	})
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(wire)))
		for range b.N {
			if _, err := DecodeDeltas(wire); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/delta")
		b.ReportMetric(perDelta, "bytes/delta")
	})
	one := must(AppendDeltas(nil, ds[:1]))
	b.Run("decode-one", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if _, err := DecodeDeltas(one); err != nil {
				b.Fatal(err)
			}
		}
	})
	acct := Delta{Since: 0, Account: &Account{User: "user0000001", Override: OverrideDND, AuthoritativeDevice: "dev1",
		Stamp: Timestamp{Wall: time.Now().UnixNano(), Logical: 3}, Writer: "gw01", Origin: Origin{"gw01", 1}, Version: 1}}
	b.Run("account-size", func(b *testing.B) {
		for range b.N {
			_ = EncodedDeltaSize(&acct)
		}
		b.ReportMetric(float64(EncodedDeltaSize(&acct)), "bytes/delta")
	})
}

// heapInUse returns the live heap after a full collection.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkMemoryPerRecord builds a replica holding 1M active sessions
// (received deltas, two groups each, 8 gateways) and reports the live heap
// it takes per record: records, indexes, origin logs, and the strings the
// decoded deltas brought, which the replica keeps.
func BenchmarkMemoryPerRecord(b *testing.B) {
	if testing.Short() {
		b.Skip("1M records: skipped under -short")
	}
	const n = 1_000_000
	for range b.N {
		b.StopTimer()
		before := heapInUse()
		ds := benchDeltas(b, n, 8)
		b.StartTimer()
		r := newTestReplica(b, "observer", 1, Config{})
		r.GroupOnlineCount("g") // a gateway's replica, with its group index
		for _, d := range ds {
			if _, _, err := r.Apply(d, 1); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		ds = nil
		after := heapInUse()
		if got := r.Stats().Active; got != n {
			b.Fatalf("%d active sessions, want %d", got, n)
		}
		runtime.KeepAlive(r)
		b.ReportMetric(float64(after-before)/n, "heap-B/record")
		b.ReportMetric(float64(after-before)/(1<<20), "heap-MB")
		b.StartTimer()
	}
}

// BenchmarkSmallReplicaMemory builds 1000 replicas holding 0, 1 and 10
// sessions each, as a simulator runs one per simulated node, and reports
// the live heap each takes: what a small replica costs before its tables
// reach their full sizes.
func BenchmarkSmallReplicaMemory(b *testing.B) {
	const replicas = 1000
	for _, held := range []int{0, 1, 10} {
		b.Run(fmt.Sprintf("sessions=%d", held), func(b *testing.B) {
			var ds []Delta
			if held > 0 {
				ds = benchDeltas(b, held, 1)
			}
			for range b.N {
				b.StopTimer()
				before := heapInUse()
				b.StartTimer()
				rs := make([]*Replica, replicas)
				for i := range rs {
					rs[i] = newTestReplica(b, fmt.Sprintf("n%04d", i), 1, Config{})
					for _, d := range ds {
						if _, _, err := rs[i].Apply(d, 1); err != nil {
							b.Fatal(err)
						}
					}
				}
				b.StopTimer()
				after := heapInUse()
				runtime.KeepAlive(rs)
				b.ReportMetric(float64(after-before)/replicas, "heap-B/replica")
				b.StartTimer()
			}
		})
	}
}

// BenchmarkDigestDiff: two replicas of 1M records from 10 gateways, one
// missing 1% of them; time the anti-entropy exchange that repairs it
// (Digest on the lagging side, Diff on the other, ApplySync), and report how
// many records it sent. Watermarks make the cost follow the distance from
// the lowest gap, not the number of missing records, so the missing 1% is
// taken two ways: the newest writes of every gateway (a replica that fell
// behind), and writes scattered at random (lost deltas).
func BenchmarkDigestDiff(b *testing.B) {
	if testing.Short() {
		b.Skip("1M records: skipped under -short")
	}
	const n, gateways = 1_000_000, 10
	ds := benchDeltas(b, n, gateways)
	full := newTestReplica(b, "full", 1, Config{})
	for _, d := range ds {
		if _, _, err := full.Apply(d, 1); err != nil {
			b.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name    string
		missing func(i int) bool
	}{
		{"newest-1pct", func(i int) bool { return i >= n-n/100 }},
		{"scattered-1pct", func(i int) bool { return (uint64(i)*0x9E3779B97F4A7C15)>>32%100 == 0 }},
	} {
		// Each iteration builds a fresh lagging replica (seconds), so ns/op
		// counts that too and b.N stays 1; the exchange itself is
		// reported as exchange-ms.
		b.Run(tc.name, func(b *testing.B) {
			for range b.N {
				lag := newTestReplica(b, "lag", 1, Config{})
				for i, d := range ds {
					if !tc.missing(i) {
						if _, _, err := lag.Apply(d, 1); err != nil {
							b.Fatal(err)
						}
					}
				}
				runtime.GC() // measure the exchange, not a collection of the setup
				start := time.Now()
				dg := lag.Digest()
				tDigest := time.Since(start)
				sy := full.Diff(dg)
				tDiff := time.Since(start) - tDigest
				if _, err := lag.ApplySync(sy, 2); err != nil {
					b.Fatal(err)
				}
				took := time.Since(start)
				b.ReportMetric(float64(tDigest.Microseconds())/1000, "digest-ms")
				b.ReportMetric(float64(tDiff.Microseconds())/1000, "diff-ms")
				if got := lag.Stats().Sessions; got != n {
					b.Fatalf("after the sync the lagging replica holds %d records, want %d", got, n)
				}
				b.ReportMetric(float64(took.Microseconds())/1000, "exchange-ms")
				b.ReportMetric(float64(sy.Len()), "records-sent")
				b.ReportMetric(float64(len(must(AppendSync(nil, sy))))/(1<<20), "sync-MB")
			}
		})
	}
}

// BenchmarkChurnMemory: 1M connect/disconnect cycles over 10k keys, written
// by a gateway and applied by an observer, with virtual time advancing 10ms
// a cycle (each user reconnects every 100s) and GC every 10s of it. The live
// heap is reported after the first pass over the keys, half way and at the
// end: tombstones are collected, so once a tombstone horizon (60k cycles)
// has passed the heap stays flat.
func BenchmarkChurnMemory(b *testing.B) {
	if testing.Short() {
		b.Skip("1M cycles: skipped under -short")
	}
	const keys, cycles = 10_000, 1_000_000
	for range b.N {
		gw := newTestReplica(b, "gw", 1, Config{})
		obs := newTestReplica(b, "obs", 1, Config{})
		gw.GroupOnlineCount("g") // gateways' replicas, with their group indexes
		obs.GroupOnlineCount("g")
		users := make([]string, keys)
		for i := range users {
			users[i] = fmt.Sprintf("user%05d", i)
		}
		epochs := make([]uint64, keys)
		now := int64(time.Hour)
		var start, mid uint64
		for c := range cycles {
			k := c % keys
			epochs[k]++
			s := Session{User: users[k], Device: "phone", ID: fmt.Sprintf("s%d", c), Epoch: epochs[k],
				State: StateActive, Groups: []string{"all", users[k][:6]}}
			d1, err := gw.PutLocal(s, now)
			if err != nil {
				b.Fatal(err)
			}
			s.State = StateDisconnected
			d2, err := gw.PutLocal(s, now)
			if err != nil {
				b.Fatal(err)
			}
			for _, d := range []Delta{d1, d2} {
				if _, _, err := obs.Apply(d, now); err != nil {
					b.Fatal(err)
				}
			}
			now += int64(10 * time.Millisecond)
			if c%1_000 == 999 {
				gw.GC(now)
				obs.GC(now)
			}
			if c == keys-1 || c == cycles/2-1 {
				b.StopTimer()
				if c == keys-1 {
					start = heapInUse()
				} else {
					mid = heapInUse()
				}
				b.StartTimer()
			}
		}
		b.StopTimer()
		end := heapInUse()
		st := obs.Stats()
		runtime.KeepAlive(gw)
		b.ReportMetric(float64(start)/(1<<20), "heap-MB-start")
		b.ReportMetric(float64(mid)/(1<<20), "heap-MB-mid")
		b.ReportMetric(float64(end)/(1<<20), "heap-MB-end")
		b.ReportMetric(float64(st.Sessions), "records-end")
		b.ReportMetric(float64(cycles)/b.Elapsed().Seconds(), "cycles/s")
		b.StartTimer()
	}
}
