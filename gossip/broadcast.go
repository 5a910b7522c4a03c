package gossip

import "github.com/hashicorp/memberlist"

// NewBroadcast wraps a message for memberlist's piggyback queue: a delta
// batch (name empty) invalidates nothing; an alive announcement (name
// "alive/NODE") replaces the older one of the same name.
func NewBroadcast(msg []byte, name string) memberlist.Broadcast {
	if name == "" {
		return &uniqueBroadcast{msg: msg}
	}
	return &namedBroadcast{msg: msg, name: name}
}

// namedBroadcast is a piggybacked message that replaces older ones of the
// same name (an origin's alive announcement).
type namedBroadcast struct {
	msg  []byte
	name string
}

var _ memberlist.NamedBroadcast = (*namedBroadcast)(nil)

func (b *namedBroadcast) Invalidates(other memberlist.Broadcast) bool {
	o, ok := other.(*namedBroadcast)
	return ok && o.name == b.name
}

func (b *namedBroadcast) Name() string    { return b.name }
func (b *namedBroadcast) Message() []byte { return b.msg }
func (b *namedBroadcast) Finished()       {}

// uniqueBroadcast is a piggybacked delta batch. It invalidates nothing, and
// says so (memberlist.UniqueBroadcast), so queueing it does not scan the
// whole queue for something to replace.
type uniqueBroadcast struct{ msg []byte }

var _ memberlist.UniqueBroadcast = (*uniqueBroadcast)(nil)

func (b *uniqueBroadcast) Invalidates(memberlist.Broadcast) bool { return false }
func (b *uniqueBroadcast) UniqueBroadcast()                      {}
func (b *uniqueBroadcast) Message() []byte                       { return b.msg }
func (b *uniqueBroadcast) Finished()                             {}
