package webhook_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rollcall/rollcall/webhook"
)

// The receiver docs/webhooks.md shows, between the markers: standard
// library only, as an application would write it.

// docs:begin

// verify checks a Rollcall webhook: its timestamp is within five minutes
// of now, and one of its v1 signatures is the HMAC-SHA256 of
// "<webhook-id>.<webhook-timestamp>.<body>" under the secret
// ("whsec_<base64>").
func verify(secret string, h http.Header, body []byte, now time.Time) error {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		return err
	}
	id, ts := h.Get("webhook-id"), h.Get("webhook-timestamp")
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || id == "" {
		return errors.New("missing webhook-id or webhook-timestamp")
	}
	if d := now.Sub(time.Unix(sec, 0)); d > 5*time.Minute || d < -5*time.Minute {
		return errors.New("timestamp too old or too new")
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "."))
	mac.Write(body)
	want := mac.Sum(nil)
	for _, sig := range strings.Fields(h.Get("webhook-signature")) {
		got, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(sig, "v1,"))
		if strings.HasPrefix(sig, "v1,") && err == nil && hmac.Equal(got, want) {
			return nil
		}
	}
	return errors.New("bad signature")
}

// handler answers 204 to each verified webhook and processes each
// webhook-id once: a change can arrive more than once (retries, and
// around gateways joining or failing, from two gateways), always under
// the same id.
func handler(secret string, seen func(id string) bool, process func(body []byte)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil || verify(secret, r.Header, body, time.Now()) != nil {
			http.Error(w, "bad webhook", http.StatusUnauthorized)
			return
		}
		if !seen(r.Header.Get("webhook-id")) {
			process(body) // {"type":"user.online","timestamp":"...","data":{"user":...}}
		}
		w.WriteHeader(http.StatusNoContent)
	})
}

// docs:end

func TestReceiverExampleVerifies(t *testing.T) {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw" // the specification's vector
	h := http.Header{}
	h.Set("webhook-id", "msg_p5jXN8AQM9LWM0D4loKWxJek")
	h.Set("webhook-timestamp", "1614265330")
	h.Set("webhook-signature", "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
	at := time.Unix(1614265330, 0)
	body := []byte(`{"test": 2432232314}`)
	if err := verify(secret, h, body, at); err != nil {
		t.Fatalf("the vector: %v", err)
	}
	if verify(secret, h, []byte(`{"test": 2432232315}`), at) == nil || verify(secret, h, body, at.Add(time.Hour)) == nil {
		t.Fatal("a changed body or an old timestamp verified")
	}

	// What a gateway sends, twice (a retry): processed once.
	key, _ := webhook.ParseSecret(secret)
	ids := map[string]bool{}
	var processed [][]byte
	srv := httptest.NewServer(handler(secret, func(id string) bool { was := ids[id]; ids[id] = true; return was },
		func(b []byte) { processed = append(processed, b) }))
	defer srv.Close()
	ev := []byte(`{"type":"user.online","timestamp":"2026-01-02T03:04:05Z","data":{"user":"alice","status":"available","sessions":[]}}`)
	for range 2 {
		ts := strconv.FormatInt(time.Now().Unix(), 10)
		req, _ := http.NewRequest(http.MethodPost, srv.URL, bytes.NewReader(ev))
		req.Header.Set("webhook-id", "msg_abc")
		req.Header.Set("webhook-timestamp", ts)
		sec, _ := strconv.ParseInt(ts, 10, 64)
		req.Header.Set("webhook-signature", "v1,AAAA "+webhook.Sign(key, "msg_abc", sec, ev))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	if len(processed) != 1 {
		t.Fatalf("processed %d times", len(processed))
	}
}

// TestDocsShowTheReceiverExample keeps docs/webhooks.md's receiver the
// code tested above.
func TestDocsShowTheReceiverExample(t *testing.T) {
	src, err := os.ReadFile("receiver_example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(string(src), "// docs:begin\n\n")
	code, _, _ := strings.Cut(rest, "\n// docs:end")
	doc, err := os.ReadFile("../docs/webhooks.md")
	if err != nil {
		t.Fatal(err)
	}
	if code == "" || !strings.Contains(string(doc), code) {
		t.Fatalf("docs/webhooks.md does not hold the receiver of receiver_example_test.go verbatim:\n%s", code)
	}
}
