package node

import (
	"bytes"
	"net"
	"time"
)

// What may fill a connection's outbound queue. The
// queue's bound (Config.OutboundQueue frames, OutboundQueueBytes bytes)
// exists to drop a client that does not read: the replies and events it
// lets pile up. Three kinds of frames must not trip it for a client that
// reads promptly:
//
//   - messages, which anyone may send to anyone: a flood from other
//     sessions would otherwise cut the recipient (sendMessage);
//   - the snapshot of a sub, up to 1,000 users and a whole group's online
//     members, more than the queue holds: it is sent in pages of a quarter
//     of the bound, each once the queue is below half of it
//     (snapshotPage), the connection's next request read only after the
//     last;
//   - the replies to requests the client pipelines faster than it reads
//     them (roomWait).
//
// A group reply is paged by the client instead (handleGroup), each page cut
// to half the byte bound.

// sendMessage queues a message frame unless the queue already holds half
// its frame or byte bound (an empty queue takes any frame that fits). A
// message that does not fit is not queued for this connection, which stays
// open, and sendMessage reports false: messages are best effort, like a
// message to an offline user, and never make a slow consumer; only what a
// client fails to read of its own replies and events does.
func (c *conn) sendMessage(frame []byte) bool {
	q := &c.q
	maxFrames, maxBytes := c.n.cfg.OutboundQueue, c.n.cfg.OutboundQueueBytes
	q.mu.Lock()
	frames, bytes := len(q.frames)+1, q.bytes+len(frame)
	if q.closing || frames > maxFrames || bytes > maxBytes ||
		(frames > 1 && (2*frames > maxFrames || 2*bytes > maxBytes)) {
		q.mu.Unlock()
		return false
	}
	q.frames = append(q.frames, frame)
	q.bytes += len(frame)
	q.mu.Unlock()
	c.wakeWriter()
	return true
}

// roomWait returns a channel the connection's reader waits on, before it
// handles the next request (or sends the next page of a sub's snapshot),
// while the outbound queue holds half its bound or more: it is closed once
// the writer takes the queue (or the connection closes); nil when there is
// room. The reader goroutine blocks on it; the event loop pauses the
// connection instead (conn.pause), so its poller never waits. A client
// that pipelines requests faster than it reads their replies is slowed, as
// TCP slows a sender faster than its receiver, instead of being cut as a
// slow consumer for its own replies; one that reads nothing is still
// dropped by its writer's timeout. Events and messages pushed meanwhile
// from other sessions still count against the bound.
func (c *conn) roomWait() <-chan struct{} {
	q := &c.q
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closing || (2*len(q.frames) < c.n.cfg.OutboundQueue && 2*q.bytes < c.n.cfg.OutboundQueueBytes) {
		return nil
	}
	if q.roomFreed == nil {
		q.roomFreed = make(chan struct{})
	}
	return q.roomFreed
}

// freeRoomLocked notes that the queued frames have left the queue (taken
// by the writer, or dropped with the connection) and wakes the reader
// waiting for room (roomWait). The caller holds q.mu.
func (q *outQueue) freeRoomLocked() {
	if q.roomFreed != nil {
		close(q.roomFreed)
		q.roomFreed = nil
	}
}

// sendSnapshotPages sends the pages of the sub's snapshot c holds, each
// once there is room (roomWait), and returns the channel to wait on before
// the next page, or before the next request once the last page is queued;
// nil when there is room and no page is left. The caller is c's reader.
func (c *conn) sendSnapshotPages() <-chan struct{} {
	for {
		if room := c.roomWait(); room != nil {
			return room
		}
		if c.snap == nil {
			return nil
		}
		if c.n.pageHook != nil {
			c.n.pageHook()
		}
		if !c.n.snapshotPage(c) {
			return nil
		}
	}
}

// writeFrames writes a batch the writer took, in pieces of at most
// OutboundQueueBytes (at least one frame each), each within timeout: so
// WriteTimeout bounds the time to write what the queue's bound holds, and a
// larger batch (a snapshot) gets time in proportion, not one deadline for
// all of it.
func (c *conn) writeFrames(frames [][]byte, timeout time.Duration) error {
	limit := c.n.cfg.OutboundQueueBytes
	for len(frames) > 0 {
		k, size := 1, len(frames[0])
		for k < len(frames) && size+len(frames[k]) <= limit {
			size += len(frames[k])
			k++
		}
		c.nc.SetWriteDeadline(time.Now().Add(timeout)) //nolint:errcheck // shows up as a write error
		if c.tls != nil && k > 1 {
			// tls.Conn writes a record, and makes a syscall, per Write:
			// join the frames so a batch fills records.
			if _, err := c.nc.Write(bytes.Join(frames[:k], nil)); err != nil {
				return err
			}
		} else {
			bufs := net.Buffers(frames[:k])
			if _, err := bufs.WriteTo(c.nc); err != nil {
				return err
			}
		}
		frames = frames[k:]
	}
	return nil
}
