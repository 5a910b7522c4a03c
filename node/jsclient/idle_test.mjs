// The JavaScript client's idle timer, driven by a fake clock, fake input
// events and a fake WebSocket that answers like a gateway; run by
// jsclient_idle_test.go: node idle_test.mjs CLIENT_MJS. Exits non-zero
// with the failed assertion.
import assert from "node:assert/strict";
import {pathToFileURL} from "node:url";

const {RollcallClient} = await import(pathToFileURL(process.argv[2]).href);

// A WebSocket whose far end welcomes every hello and oks every request.
let epoch = 0;
class FakeWS {
  static all = [];
  constructor(url) {
    this.url = url;
    this.readyState = 0;
    this.sent = [];
    FakeWS.all.push(this);
    queueMicrotask(() => { this.readyState = 1; if (this.onopen) this.onopen(); });
  }
  send(data) {
    const m = JSON.parse(data);
    this.sent.push(m);
    queueMicrotask(() => {
      if (this.readyState !== 1) return;
      if (m.op === "hello") this.deliver({op: "welcome", epoch: ++epoch, device: "web", gateway: "g0", session: "s" + epoch, heartbeat_ms: 3600e3});
      else if (m.id !== undefined) this.deliver({op: "ok", id: m.id});
    });
  }
  deliver(o) { if (this.onmessage) this.onmessage({data: JSON.stringify(o)}); }
  // drop: the connection ends from the far side.
  drop() {
    this.readyState = 3;
    queueMicrotask(() => { if (this.onclose) this.onclose({code: 1006, reason: ""}); });
  }
  close() { if (this.readyState !== 3) this.drop(); }
}

// A clock whose time moves only when advance says.
class FakeClock {
  constructor() { this.t = 0; this.timers = new Map(); this.seq = 0; }
  now() { return this.t; }
  setTimeout(fn, ms) { const h = ++this.seq; this.timers.set(h, {at: this.t + ms, fn}); return h; }
  clearTimeout(h) { this.timers.delete(h); }
  advance(ms) {
    const end = this.t + ms;
    for (;;) {
      let next = null;
      for (const [h, tm] of this.timers) if (tm.at <= end && (next === null || tm.at < this.timers.get(next).at)) next = h;
      if (next === null) break;
      const tm = this.timers.get(next);
      this.timers.delete(next);
      this.t = tm.at;
      tm.fn();
    }
    this.t = end;
  }
}

// The status values sent in status requests, over every connection.
const statuses = () => FakeWS.all.flatMap(ws => ws.sent.filter(m => m.op === "status").map(m => m.status));
const input = (target, type) => target.dispatchEvent(new Event(type));
const until = async (what, cond) => {
  for (let i = 0; i < 500 && !cond(); i++) await new Promise(r => setTimeout(r, 10));
  assert.ok(cond(), "timed out waiting for " + what);
};

{
  const clock = new FakeClock();
  const target = new EventTarget();
  const doc = new EventTarget();
  doc.visibilityState = "visible";
  const c = new RollcallClient({urls: "ws://gw/ws", user: "alice", status: "busy", WebSocket: FakeWS,
    idleAfter: 1000, idleTarget: target, idleDocument: doc, idleClock: clock});
  await c.connect();
  assert.equal(FakeWS.all[0].sent[0].status, "busy", "the first hello's status");

  // Input resets the quiet time: no away 1200 ms after connect with input at 600.
  clock.advance(600);
  input(target, "keydown");
  clock.advance(600);
  assert.deepEqual(statuses(), [], "a status request before idleAfter without input");
  clock.advance(400);
  assert.deepEqual(statuses(), ["away"], "idleAfter without input");
  assert.equal(c.idle, true);

  // setStatus while idle sends nothing and is what input restores.
  await c.setStatus("available");
  assert.deepEqual(statuses(), ["away"], "setStatus while idle sent a request");
  for (const type of ["mousemove", "mousemove"]) input(target, type);
  assert.deepEqual(statuses(), ["away", "available"], "input after idle restores the status set while idle");
  assert.equal(c.idle, false);

  // Every input kind counts.
  for (const type of ["pointerdown", "touchstart", "wheel", "focus", "keydown", "mousemove"]) {
    clock.advance(900);
    input(target, type);
  }
  assert.deepEqual(statuses(), ["away", "available"], "input kinds did not keep the session active");

  // A hidden page: its time is idle time, input to it does not count,
  // showing it again ends idleness.
  doc.visibilityState = "hidden";
  input(doc, "visibilitychange");
  clock.advance(500);
  input(target, "wheel");
  clock.advance(500);
  assert.deepEqual(statuses(), ["away", "available", "away"], "a page hidden for idleAfter");
  doc.visibilityState = "visible";
  input(doc, "visibilitychange");
  assert.deepEqual(statuses(), ["away", "available", "away", "available"], "the page shown again");

  // Idle survives a reconnect: the new hello says away, the app's status
  // comes back on the next input.
  clock.advance(1000);
  assert.equal(c.idle, true);
  const n = statuses().length;
  FakeWS.all[0].drop();
  await until("the reconnect", () => FakeWS.all.length === 2 && c.state === "connected");
  const hello = FakeWS.all[1].sent[0];
  assert.equal(hello.op, "hello");
  assert.equal(hello.status, "away", "the hello after a reconnect while idle");
  assert.equal(statuses().length, n, "a status request at the reconnect");
  input(target, "pointerdown");
  assert.deepEqual(FakeWS.all[1].sent.filter(m => m.op === "status").map(m => m.status), ["available"]);

  // setIdle by hand, and close: listeners and timer gone.
  await c.setIdle(true);
  await c.setIdle(true);
  await c.setIdle(false);
  assert.deepEqual(statuses().slice(-2), ["away", "available"], "setIdle sends only changes");
  const closing = c.close();
  input(target, "keydown");
  clock.advance(10 * 1000);
  await closing;
  assert.equal(clock.timers.size, 0, "an idle timer left after close");
  assert.deepEqual(statuses().slice(-2), ["away", "available"], "status sent after close");
}

{
  // idleAfter: 0 turns the timer off; so does no input target (Node.js).
  FakeWS.all = [];
  const clock = new FakeClock();
  const target = new EventTarget();
  const off = new RollcallClient({urls: "ws://gw/ws", user: "bob", WebSocket: FakeWS, idleAfter: 0, idleTarget: target, idleClock: clock});
  const bare = new RollcallClient({urls: "ws://gw/ws", user: "carol", WebSocket: FakeWS, idleAfter: 1000, idleClock: clock});
  await off.connect();
  await bare.connect();
  clock.advance(3600e3);
  assert.equal(clock.timers.size, 0, "an idle timer with idleAfter 0 or no input target");
  assert.deepEqual(statuses(), [], "away sent with the idle timer off");
  await off.close();
  await bare.close();
}
process.stdout.write("ok\n");
process.exit(0);
