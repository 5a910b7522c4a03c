package gossip

import "testing"

func TestTrafficCountsByTypeAndTransport(t *testing.T) {
	var s Stats
	s.countSent([]byte{wireVersion, byte(msgDeltas), 1, 2, 3}, transportPacket)
	s.countSent([]byte{wireVersion, byte(msgDeltas), 1}, transportPacket)
	s.countSent([]byte{wireVersion, byte(msgSync), 1, 2}, transportStream)
	s.countReceived([]byte{wireVersion, byte(msgRoute), 9})
	for _, garbage := range [][]byte{nil, {wireVersion}, {wireVersion + 1, byte(msgDeltas)}, {wireVersion, 0}, {wireVersion, byte(msgTypeMax) + 1}} {
		s.countReceived(garbage)
	}
	sent := map[[2]string]Traffic{}
	for _, tr := range s.Sent() {
		sent[[2]string{tr.Type, tr.Transport}] = tr
	}
	if len(sent) != (int(msgTypeMax)+1)*int(numTransports) {
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
