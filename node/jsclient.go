package node

import (
	_ "embed"
	"net/http"
)

// The browser client, on the HTTP endpoint (open, no secrets):
//
//	GET /client.js   the JavaScript client (jsclient/client.js): one
//	                 dependency-free ES module speaking the client protocol
//	                 over /ws
//	GET /demo/       a demo page using it: a group's roster with live status
//	                 dots, status text and last seen; gateway URLs, user,
//	                 token and group come from the query string

//go:embed jsclient/client.js
var jsClient []byte

//go:embed jsclient/demo.html
var jsDemo []byte

func handleJSClient(mux *routeMux) {
	mux.HandleFunc("GET /client.js", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
		w.Header().Set("Cache-Control", "no-cache")
		w.Header().Set("Access-Control-Allow-Origin", "*") // a module imported from another origin needs CORS
		_, _ = w.Write(jsClient)
	})
	mux.HandleFunc("GET /demo/{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-cache")
		w.Header().Set("Referrer-Policy", "no-referrer") // the query string may hold a token
		_, _ = w.Write(jsDemo)
	})
}
