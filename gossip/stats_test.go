package gossip

import (
	"testing"

	"github.com/rollcall/rollcall/dissem"
)

func TestTrafficCountsByTypeAndTransport(t *testing.T) {
	var s Stats
	s.countSent([]byte{dissem.WireVersion, byte(dissem.TypeDeltas), 1, 2, 3}, transportPacket)
	s.countSent([]byte{dissem.WireVersion, byte(dissem.TypeDeltas), 1}, transportPacket)
	s.countSent([]byte{dissem.WireVersion, byte(dissem.TypeSync), 1, 2}, transportStream)
	s.countReceived([]byte{dissem.WireVersion, byte(dissem.TypeRoute), 9})
	for _, garbage := range [][]byte{nil, {dissem.WireVersion}, {dissem.WireVersion + 1, byte(dissem.TypeDeltas)}, {dissem.WireVersion, 0}, {dissem.WireVersion, byte(dissem.MaxType) + 1}} {
		s.countReceived(garbage)
	}
	sent := map[[2]string]Traffic{}
	for _, tr := range s.Sent() {
		sent[[2]string{tr.Type, tr.Transport}] = tr
	}
	if len(sent) != (int(dissem.MaxType)+1)*int(numTransports) {
		t.Fatalf("%d sent series, want every type and transport", len(sent))
	}
	if tr := sent[[2]string{"deltas", "packet"}]; tr.Messages != 2 || tr.Bytes != 8 {
		t.Fatalf("deltas over packets: %+v", tr)
	}
	if tr := sent[[2]string{"sync", "stream"}]; tr.Messages != 1 || tr.Bytes != 4 {
		t.Fatalf("sync over streams: %+v", tr)
	}
	got := map[string]Traffic{}
	for _, tr := range s.Received() {
		got[tr.Type] = tr
	}
	if got["route"].Messages != 1 || got["invalid"].Messages != 5 || got["invalid"].Bytes != 7 {
		t.Fatalf("received %+v", got)
	}
}
