// Package client is a Go client of Rollcall: a service imports it to hold a
// presence session and read and watch others' presence without writing
// protocol code (docs/protocol.md is the protocol).
//
//	c, err := client.Dial(ctx, client.Config{
//		Addrs:  []string{"gw1:7400", "gw2:7400"},
//		Token:  func(ctx context.Context) (string, error) { return tokens.Mint(ctx, "svc-notify") },
//		User:   "svc-notify",
//		Device: "worker-1",
//		Logger: logger,
//	})
//	if err != nil { ... }
//	defer c.Close() // bye: the session shows offline at once
//
//	sub, err := c.Subscribe(ctx, "alice", "bob")
//	for ev := range sub.Events() {
//		fmt.Println(ev.User, ev.Online, ev.Status)
//	}
//
// Dial returns once a gateway has welcomed the session. From then on the
// Client keeps the session alive by itself:
//
//   - it heartbeats at the gateway's heartbeat_ms, and presents a fresh
//     token from Config.Token (refresh) at two thirds of the current one's
//     remaining lifetime;
//   - when the connection ends it reconnects with jittered exponential
//     backoff (Config.Backoff, 100ms doubling to 10s by default), sending
//     the previous epoch as last_epoch, rotating through Config.Addrs, and
//     trying first the gateways a draining gateway named in shutting_down;
//   - after a reconnect it says hello with its current status and groups
//     and subscribes again to every subject of its open Subscriptions,
//     before any other request goes out on the new connection; requests
//     other than Send that were in flight are sent again (Send returns
//     ErrConnectionLost instead: its message may have been delivered);
//   - an event whose version is not newer than the last one delivered for
//     its subject is dropped, so a Subscription never goes back in time;
//   - superseded (another connection took this user and device) stops the
//     client: Done closes and Err reports it. It does not reconnect, which
//     would take the session back and start a fight;
//   - kicked (the app's backend ended the session, POST
//     /v1/users/{user}/disconnect) stops the client the same way: the
//     backend decided the session ends, so it does not reconnect.
//
// Idle: SetIdle(ctx, true) shows the session away without losing the
// status the application set; SetIdle(ctx, false) shows that status again
// (available if it set none). A Status call while idle changes only the
// status to restore: the session stays away until SetIdle(false). The
// idle state survives reconnects (an idle client's hello says away). The
// client does not watch for input itself; the application decides when
// its user is idle (the browser client's idle timer follows the same
// rules).
//
// A caller that speaks the protocol itself (a terminal client such as
// `rollcall connect`, a protocol test, a bridge) uses DialRaw instead: a
// RawClient writes the caller's request lines as they are (Send) and hands
// back every line the gateways send, unparsed and in order (Lines), while
// the library still does hello, heartbeats, reconnects and failover. Lines
// marks each lost connection with a RawLine whose Lost says why; the next
// connection's welcome follows. The library sends nothing else on a
// RawClient's connections (no ids of its own, no token refresh), so what
// the caller changes with its lines is its own to restore after a
// reconnect.
//
//	r, err := client.DialRaw(ctx, cfg)
//	go func() {
//		for l := range r.Lines() {
//			fmt.Printf("%s\n", l.Data) // or l.Lost: reconnecting
//		}
//	}()
//	err = r.Send(ctx, []byte(`{"op":"get","users":["bob"],"id":1}`))
//
// Refused requests return *Error carrying the gateway's code (HasCode,
// errors.As). Dial (and DialRaw) retries the first connect until its ctx
// is done; Config.DialAttempts bounds it instead. Config.Dial is the
// transport seam: a DialFunc returns a Conn of protocol lines, DialAny
// (TCP, TLS or WebSocket) by default.
package client
