package node

// What may fill a connection's outbound queue (issue 13, fault 7). The
// queue's bound (Config.OutboundQueue frames, OutboundQueueBytes bytes)
// exists to drop a client that does not read: the replies and events it
// lets pile up. Two kinds of frames must not trip it for a client that
// reads promptly:
//
//   - messages, which anyone may send to anyone: a flood from other
//     sessions would otherwise cut the recipient (sendMessage);
//   - the initial events of a sub, up to 1,000 users or a whole group's
//     online members in one go, more than the queue holds (sendSnapshot).

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
