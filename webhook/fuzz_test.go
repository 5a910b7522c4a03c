package webhook

import (
	"net/http"
	"testing"
	"time"
)

// FuzzParseSecrets: a secret file's text never panics the parser, and
// what it accepts is within the bounds.
func FuzzParseSecrets(f *testing.F) {
	f.Add(specSecret + "\n")
	f.Add("# comment\n\n" + specSecret + "\n" + FormatSecret(make([]byte, 64)))
	f.Add("whsec_")
	f.Add("whsec_====\n")
	f.Add(FormatSecret(make([]byte, 65)))
	f.Fuzz(func(t *testing.T, text string) {
		keys, err := ParseSecrets(text)
		if err != nil {
			return
		}
		for _, k := range keys {
			if len(k) < MinSecretBytes || len(k) > MaxSecretBytes {
				t.Fatalf("accepted a %d-byte secret", len(k))
			}
		}
	})
}

// FuzzVerify: whatever headers and body a receiver gets, Verify answers
// without panicking, and accepts only the body signed with its key.
func FuzzVerify(f *testing.F) {
	f.Add(specID, "1614265330", specSignature, specBody)
	f.Add(specID, "1614265330", "v1a,AAAA v1,"+specSignature[3:]+" v1,", specBody)
	f.Add("", "", "", "")
	f.Add("msg_x", "-99999999999999999999", "v1,!!!!", "{}")
	f.Add("msg_x", "1614265330", "v1", "{}")
	key, _ := ParseSecret(specSecret)
	at := time.Unix(specTimestamp, 0)
	f.Fuzz(func(t *testing.T, id, ts, sig, body string) {
		h := http.Header{}
		h.Set(HeaderID, id)
		h.Set(HeaderTimestamp, ts)
		h.Set(HeaderSignature, sig)
		if Verify(h, []byte(body), [][]byte{key}, at, 5*time.Minute) == nil && !(id == specID && ts == "1614265330" && body == specBody) {
			t.Fatalf("verified id %q ts %q sig %q body %q", id, ts, sig, body)
		}
	})
}
