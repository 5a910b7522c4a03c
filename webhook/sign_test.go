package webhook

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The Standard Webhooks reference libraries' signing vector
// (https://github.com/standard-webhooks/standard-webhooks/blob/main/libraries/go/webhook_test.go,
// TestWebhookSign).
const (
	specSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	specID        = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	specTimestamp = 1614265330
	specBody      = `{"test": 2432232314}`
	specSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

func TestSignMatchesTheSpecificationsVector(t *testing.T) {
	key, err := ParseSecret(specSecret)
	if err != nil {
		t.Fatal(err)
	}
	if got := Sign(key, specID, specTimestamp, []byte(specBody)); got != specSignature {
		t.Fatalf("signature %s, want %s", got, specSignature)
	}
	if FormatSecret(key) != specSecret {
		t.Fatalf("FormatSecret %s", FormatSecret(key))
	}
	h := specHeader(specSignature)
	if err := Verify(h, []byte(specBody), [][]byte{key}, time.Unix(specTimestamp+10, 0), 5*time.Minute); err != nil {
		t.Fatalf("verify the vector: %v", err)
	}
}

func specHeader(sig string) http.Header {
	h := http.Header{}
	h.Set(HeaderID, specID)
	h.Set(HeaderTimestamp, strconv.Itoa(specTimestamp))
	h.Set(HeaderSignature, sig)
	return h
}

func TestVerifyRefuses(t *testing.T) {
	key, _ := ParseSecret(specSecret)
	other := NewSecret()
	at := time.Unix(specTimestamp, 0)
	body := []byte(specBody)
	cases := []struct {
		name string
		h    http.Header
		body []byte
		keys [][]byte
		now  time.Time
		want error
	}{
		{"no id", func() http.Header { h := specHeader(specSignature); h.Del(HeaderID); return h }(), body, [][]byte{key}, at, ErrMissingHeaders},
		{"no signature", func() http.Header { h := specHeader(specSignature); h.Del(HeaderSignature); return h }(), body, [][]byte{key}, at, ErrMissingHeaders},
		{"old", specHeader(specSignature), body, [][]byte{key}, at.Add(6 * time.Minute), ErrTimestamp},
		{"future", specHeader(specSignature), body, [][]byte{key}, at.Add(-6 * time.Minute), ErrTimestamp},
		{"bad timestamp", func() http.Header { h := specHeader(specSignature); h.Set(HeaderTimestamp, "soon"); return h }(), body, [][]byte{key}, at, ErrTimestamp},
		{"other key", specHeader(specSignature), body, [][]byte{other}, at, ErrSignature},
		{"body changed", specHeader(specSignature), []byte(`{"test":2432232314}`), [][]byte{key}, at, ErrSignature},
		{"v2 only", specHeader(strings.Replace(specSignature, "v1,", "v2,", 1)), body, [][]byte{key}, at, ErrSignature},
	}
	for _, c := range cases {
		if err := Verify(c.h, c.body, c.keys, c.now, 5*time.Minute); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	// Several signatures, one of them good (rotation): accepted by
	// either key's holder.
	h := specHeader("v1a,AAAA " + Sign(other, specID, specTimestamp, body) + " " + specSignature)
	for _, k := range [][]byte{key, other} {
		if err := Verify(h, body, [][]byte{k}, at, time.Minute); err != nil {
			t.Errorf("rotation: %v", err)
		}
	}
}

func TestParseSecrets(t *testing.T) {
	if _, err := ParseSecret("whsec_" + strings.Repeat("A", 28)); err == nil { // 21 bytes
		t.Error("a 21-byte secret was accepted")
	}
	if _, err := ParseSecret("whsec_not*base64"); err == nil {
		t.Error("bad base64 accepted")
	}
	if _, err := ParseSecret(FormatSecret(make([]byte, 65))); err == nil {
		t.Error("a 65-byte secret was accepted")
	}
	keys, err := ParseSecrets("# current first\n" + specSecret + "\n\n  " + FormatSecret(make([]byte, 32)) + "  \n")
	if err != nil || len(keys) != 2 || len(keys[1]) != 32 {
		t.Fatalf("keys %d, %v", len(keys), err)
	}
	if _, err := ParseSecrets("# nothing\n"); err == nil {
		t.Error("a file without secrets was accepted")
	}
	if _, err := ParseSecrets(specSecret + "\nwhsec_short\n"); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("error %v does not name line 2", err)
	}
}
