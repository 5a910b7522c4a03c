// Package protocol is the Rollcall client wire protocol: the request,
// reply and event lines a client and a gateway exchange, their op names,
// error codes and limits, and the line framing that carries them.
// docs/protocol.md is its prose, for client authors; this package is the
// declaration the gateway (node), the Go client (client), the chaos harness
// and the bench tools all import, so the protocol is written down once.
//
// It depends on the standard library only, so a client importing it pulls
// in nothing of the gateway.
//
// Transport: TCP (or TLS, or one WebSocket text message per line),
// newline-delimited JSON, one object per line, at most MaxLineBytes
// (64 KiB) per request line by default, newline excluded. A trailing "\r"
// is ignored, and so are empty lines. Unknown fields are ignored, so the
// protocol grows by adding fields.
//
// Flow:
//
//	client                                   gateway
//	  | -- TCP connect ----------------------> |  Connecting: hello due within
//	  | -- {"op":"hello",user,token,...} ----> |  the handshake timeout (10s)
//	  | <- {"op":"welcome",session,epoch,...}- |  Active: crdt write (active)
//	  | -- {"op":"hb"} (every heartbeat_ms) -> |  deadline refreshed, no reply,
//	  |                                        |  no crdt write
//	  | -- {"op":"status",...,"id":1} -------> |  crdt write
//	  | <- {"op":"ok","id":1} ---------------- |
//	  | -- {"op":"sub","users":["bob"]} -----> |
//	  | <- {"op":"ok"} ----------------------- |
//	  | <- {"op":"event","user":"bob",...} --- |  one per subject at once,
//	  | <- {"op":"event",...} ---------------- |  then one per change
//	  | -- {"op":"bye"} ---------------------> |  crdt write (disconnected)
//	  | <- {"op":"ok"} ----------------------- |  connection closed
//
// Every request but hb gets exactly one reply (hb only when it carries an
// id); replies echo the request's "id" (a string or a number) and come in
// request order. Events and messages may come between replies at any time.
// Any valid request refreshes the session's deadline; a session that sends
// nothing for its timeout expires (error "expired", connection closed).
// Closing the TCP connection ends the session at once (disconnected).
//
// Errors are {"op":"error","code":C,"message":M[,"id":I]}. After a code
// whose ErrorCode.Closes is true, the gateway writes the error line and
// closes the connection.
package protocol
