package bench

import (
	"strings"
	"testing"
	"time"
)

func validConfig() *WorkerConfig {
	return &WorkerConfig{Run: "r", Sessions: 10, Addrs: []string{"127.0.0.1:1"}, Transport: "tcp", ConnectRate: 5,
		StatusRate: 1, Subscribers: 2, Watch: 5, Silent: 1, SilentAfter: time.Second}
}

func TestBenchMsgRoundTrip(t *testing.T) {
	var h Histogram
	h.Record(3 * time.Millisecond)
	h.Record(5 * time.Millisecond)
	for _, m := range []Msg{
		{Type: MsgConfig, Config: validConfig()},
		{Type: MsgStart}, {Type: MsgStop},
		{Type: MsgProgress, Progress: &Progress{Established: 3}},
		{Type: MsgConnected, Connected: &ConnectReport{Established: 2, Connect: h, TimeoutMS: 15000}},
		{Type: MsgResult, Result: &WorkerResult{Elapsed: time.Second, Changes: 2, Request: h, Timeline: []Second{{Changes: 2, Request: h}}}},
		{Type: MsgError, Error: "boom"},
	} {
		b, err := EncodeMsg(m)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeMsg(b)
		if err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		if got.Type != m.Type {
			t.Fatalf("type %q, want %q", got.Type, m.Type)
		}
	}
}

func TestBenchDecodeMsgRefusesBadInput(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{``, "empty"},
		{`not json`, "bad protocol line"},
		{`{"type":"start"} {"type":"stop"}`, "trailing"},
		{`{"type":"start","extra":1}`, "unknown field"},
		{`{"type":"dance"}`, "unknown type"},
		{`{"type":"result"}`, "missing its payload"},
		{`{"type":"config"}`, "missing its payload"},
		{`{"type":"error"}`, "no error text"},
		{`{"type":"start","progress":{}}`, "payload of another type"},
		{`{"type":"progress","progress":{"established":-1}}`, "negative"},
		{`{"type":"connected","connected":{"established":3,"connect":{}}}`, "0 connect times for 3 sessions"},
		{`{"type":"result","result":{"elapsed":0}}`, "elapsed"},
		{`{"type":"result","result":{"elapsed":1,"request":{"b":[[3,2]],"min":3,"max":3}}}`, "more request times"},
		{`{"type":"result","result":{"elapsed":1,"request":{"b":[[99999999,1]]}}}`, "out of range"},
		{`{"type":"config","config":{"run":"r","sessions":1,"addrs":[],"transport":"tcp","connect_rate":1}}`, "no addrs"},
		{`{"type":"config","config":{"run":"r","sessions":1,"addrs":["a:1"],"transport":"udp","connect_rate":1}}`, "transport"},
		{`{"type":"config","config":{"run":"r","sessions":1,"addrs":["a:1"],"transport":"tcp","connect_rate":0}}`, "connect rate"},
		{`{"type":"config","config":{"run":"r","sessions":1,"subscribers":1,"silent":1,"addrs":["a:1"],"transport":"tcp","connect_rate":1}}`, "exceed"},
	} {
		_, err := DecodeMsg([]byte(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one mentioning %q", tc.in, err, tc.want)
		}
	}
}

func TestBenchWorkerReportsBadInput(t *testing.T) {
	var out strings.Builder
	err := RunWorker(t.Context(), strings.NewReader("{\"type\":\"start\"}\n"), &out, nil)
	if err == nil || !strings.Contains(err.Error(), "expected config") {
		t.Fatalf("worker given start first: %v", err)
	}
	m, derr := DecodeMsg([]byte(out.String()))
	if derr != nil || m.Type != MsgError || !strings.Contains(m.Error, "expected config") {
		t.Fatalf("worker's report %q: %v", out.String(), derr)
	}
	out.Reset()
	if err := RunWorker(t.Context(), strings.NewReader("garbage\n"), &out, nil); err == nil {
		t.Fatal("garbage accepted")
	}
	if err := RunWorker(t.Context(), strings.NewReader(""), &out, nil); err == nil || !strings.Contains(err.Error(), "ended") {
		t.Fatalf("empty input: %v", err)
	}
}

// FuzzDecodeMsg: seed corpus testdata/fuzz/FuzzDecodeMsg.
func FuzzDecodeMsg(f *testing.F) {
	for _, m := range []Msg{{Type: MsgStart}, {Type: MsgConfig, Config: validConfig()}, {Type: MsgError, Error: "x"}} {
		b, _ := EncodeMsg(m)
		f.Add(b)
	}
	f.Add([]byte(`{"type":"result","result":{"elapsed":1,"request":{"b":[[3,1]],"min":3,"max":3},"changes":1}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeMsg(b)
		if err != nil {
			return
		}
		// what decodes encodes and decodes again
		enc, err := EncodeMsg(m)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeMsg(enc); err != nil {
			t.Fatalf("re-decoding %s: %v", enc, err)
		}
		if m.Result != nil {
			_ = m.Result.Request.Quantile(0.99)
		}
	})
}
