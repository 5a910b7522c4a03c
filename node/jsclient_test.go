package node

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestJSClientServed: any gateway serves the browser client and its demo
// page without a token, as a JavaScript module and an HTML page that loads
// it from the same gateway.
func TestJSClientServed(t *testing.T) {
	n := uiNode(t, func(c *Config) { c.Dev = false; c.Secret = bytes.Repeat([]byte("k"), MinSecretBytes) })
	base := "http://" + n.HTTPAddr().String()
	get := func(path string) (*http.Response, []byte) {
		t.Helper()
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, body
	}
	resp, body := get("/client.js")
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/javascript") {
		t.Fatalf("GET /client.js: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if !bytes.Equal(body, jsClient) || !bytes.Contains(body, []byte("export class RollcallClient")) {
		t.Fatalf("GET /client.js: not the client module (%d bytes)", len(body))
	}
	resp, body = get("/demo/?url=ws://x/ws&user=a&group=g")
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET /demo/: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if !bytes.Contains(body, []byte(`from "/client.js"`)) {
		t.Fatal("the demo page does not load /client.js from its gateway")
	}
}
