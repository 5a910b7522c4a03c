package node

import (
	"bytes"
	"net"
	"time"
)

// What may fill a connection's outbound queue. The
// queue's bound (Config.OutboundQueue frames, OutboundQueueBytes bytes)
// exists to drop a client that does not read: the replies and events it
// lets pile up. Two kinds of frames must not trip it for a client that
// reads promptly:
//
//   - messages, which anyone may send to anyone: a flood from other
//     sessions would otherwise cut the recipient (sendMessage);
//   - the initial events of a sub, up to 1,000 users or a whole group's
//     online members in one go, more than the queue holds (sendSnapshot);
//   - the replies to requests the client pipelines faster than it reads
//     them (awaitRoom).

// sendMessage queues a message frame unless the queue already holds half
// its frame or byte bound (an empty queue takes any frame that fits; a
// snapshot waiting does not count). A
// message that does not fit is not queued for this connection, which stays
// open, and sendMessage reports false: messages are best effort, like a
// message to an offline user, and never make a slow consumer; only what a
// client fails to read of its own replies and events does.
func (c *conn) sendMessage(frame []byte) bool {
	q := &c.q
	maxFrames, maxBytes := c.n.cfg.OutboundQueue, c.n.cfg.OutboundQueueBytes
	q.mu.Lock()
	frames, bytes := len(q.frames)-q.snapFrames+1, q.bytes-q.snapBytes+len(frame)
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

// sendSnapshot queues the reply and initial events of a sub outside the
// bound. The connection's reader handles no further request until they
// have left the queue (the writer took them, or the connection died;
// roomWait): so the snapshot's size is paid by backpressure on this
// client's own requests (as TCP pushes back on a client that sends faster
// than it reads), one snapshot at a time, and never by dropping a client
// that reads promptly. A client that does not read at all is still
// dropped: its writer times out (WriteTimeout), and replies and events
// queued meanwhile count against the bound.
func (c *conn) sendSnapshot(frames [][]byte) {
	q := &c.q
	q.mu.Lock()
	if q.closing {
		q.mu.Unlock()
		return
	}
	for _, f := range frames {
		q.frames = append(q.frames, f)
		q.bytes += len(f)
		q.snapBytes += len(f)
	}
	q.snapFrames += len(frames)
	q.mu.Unlock()
	c.wakeWriter()
}

// roomWait returns a channel the connection's reader waits on, before it
// handles the next request, while the outbound queue holds a sub's snapshot
// (sendSnapshot) or half its bound or more: it is closed once the writer
// takes the queue (or the connection closes); nil when there is room. The
// reader goroutine blocks on it; the event loop pauses the connection
// instead (conn.pause), so its poller never waits. A client that
// pipelines requests faster than it reads their replies is slowed, as TCP
// slows a sender faster than its receiver, instead of being cut as a slow
// consumer for its own replies; one that reads nothing is still dropped by
// its writer's timeout. Events and messages pushed meanwhile from other
// sessions still count against the bound.
func (c *conn) roomWait() <-chan struct{} {
	q := &c.q
	q.mu.Lock()
	defer q.mu.Unlock()
	frames, bytes := len(q.frames)-q.snapFrames, q.bytes-q.snapBytes
	if q.closing || (q.snapFrames == 0 && 2*frames < c.n.cfg.OutboundQueue && 2*bytes < c.n.cfg.OutboundQueueBytes) {
		return nil
	}
	if q.snapTaken == nil {
		q.snapTaken = make(chan struct{})
	}
	return q.snapTaken
}

// releaseSnapLocked notes that the snapshot frames have left the queue
// (taken by the writer, or dropped with the connection) and wakes the
// reader waiting on them or on room (awaitRoom). The caller holds q.mu.
func (q *outQueue) releaseSnapLocked() {
	q.snapFrames, q.snapBytes = 0, 0
	if q.snapTaken != nil {
		close(q.snapTaken)
		q.snapTaken = nil
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
