// Rollcall browser client: the client protocol (docs/protocol.md) over a
// gateway's WebSocket endpoint /ws. One ES module, no dependencies; served
// by every gateway at GET /client.js.
//
//   import {RollcallClient} from "http://gw1:7401/client.js";
//   const c = new RollcallClient({urls: ["ws://gw1:7401/ws", "ws://gw2:7401/ws"],
//                                 token: async () => fetchToken(), user: "alice", device: "laptop"});
//   c.onstate = (state, info) => console.log(state, info);
//   await c.connect();
//   const sub = c.subscribe(["bob"], ev => console.log(ev.user, ev.status, lastSeenOf(ev)));
//   const team = c.subscribeGroup("team-7", ev => ...);   // ev.member says in or out
//   await c.setStatus("away");
//   sub.close(); c.close();
//
// Behaviour as docs/protocol.md "Client behaviour" and the Go client
// (client/): heartbeat every welcome.heartbeat_ms; on a lost connection
// reconnect with jittered exponential backoff (the n-th consecutive failure
// waits a random time in [d/2, d], d = min(10 s, 100 ms × 2^n)), round-robin
// over urls, carrying the device and last_epoch; after shutting_down try its
// gateways hints first (mapped to WebSocket URLs by opts.gatewayURL, since
// hints are TCP client addresses); hello carries the current status and
// groups, then every subscription is sent again; an event whose version is
// not newer than the last delivered for its subject is dropped; superseded
// stops the client, and so does kicked (state "kicked": the app's backend
// ended the session); token refresh at two thirds of its remaining lifetime.
//
// Idle: after idleAfter (default 10 minutes) without input (keydown,
// pointerdown, mousemove, touchstart, wheel, focus on the page), the page's
// hidden time included, the session shows away; the next input, or the page
// becoming visible again, shows the status the app last set. setStatus while
// idle changes only the status to restore. setIdle(bool) does the same by
// hand; the idle state survives reconnects (hello says away). As the Go
// client's SetIdle.

const PROTOCOL = 1;
const SUB_CHUNK = 1000;
const BACKOFF_BASE_MS = 100;
const BACKOFF_MAX_MS = 10000;
// Hello refusals that are configuration errors on the first connect.
const REFUSED = new Set(["auth_failed", "bad_request", "forbidden", "epoch_exhausted", "too_many_sessions"]);
// Requests whose effect the client restores itself after a reconnect.
const RESTORED = new Set(["status", "sub", "unsub", "join", "leave"]);
// The idle timer's defaults, and the input that ends idle time.
const IDLE_AFTER_MS = 10 * 60 * 1000;
const IDLE_INPUT = ["keydown", "pointerdown", "mousemove", "touchstart", "wheel", "focus"];
const realClock = {
  now: () => Date.now(),
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: t => clearTimeout(t),
};

/**
 * lastSeenOf returns when a user's last session ended, as a Date, from a
 * presence (an event, a get or group reply's entry): its last_seen, which
 * a gateway sends while the user is offline; null while online or when
 * the user was not seen within the gateways' retention.
 */
export function lastSeenOf(presence) {
  if (!presence || !presence.last_seen) return null;
  const d = new Date(presence.last_seen);
  return isNaN(d.getTime()) ? null : d;
}

/** An error reply from the gateway, or a client-side failure (code "disconnected", "closed"). */
export class RollcallError extends Error {
  constructor(code, message, reply) {
    super(`${code}: ${message}`);
    this.name = "RollcallError";
    this.code = code;
    this.reply = reply;
  }
}

/** backoffDelay is the wait before the attempt after n consecutive failures. */
export function backoffDelay(n, random = Math.random) {
  const d = Math.min(BACKOFF_MAX_MS, BACKOFF_BASE_MS * 2 ** Math.min(n, 30));
  return d / 2 + random() * (d / 2);
}

/** A subscription: to users or one group. close() unsubscribes. */
class Subscription {
  constructor(client, users, group, handler) {
    this.client = client;
    this.users = users;
    this.group = group;
    this.handler = handler;
    this.closed = false;
  }
  close() {
    if (this.closed) return Promise.resolve();
    this.closed = true;
    return this.client._unsubscribe(this);
  }
}

export class RollcallClient {
  /**
   * opts: urls (WebSocket URLs of gateways' /ws), user, device (optional;
   * otherwise the first welcome's), token (async function returning a
   * token; optional on a --dev gateway), status ("available"), groups ([]),
   * meta (the session's meta, a JSON-able object, sent at every hello),
   * gatewayURL (addr => URL or null, for shutting_down hints),
   * onstate, onmessage, WebSocket (constructor, default globalThis.WebSocket).
   * Idle: idleAfter (ms without input before the session shows away;
   * default 10 minutes; 0 turns the idle timer off), idleTarget (where
   * input events are listened for; default globalThis.window: without one,
   * as in Node.js, the timer is off), idleDocument (its visibilityState and
   * visibilitychange; default globalThis.document), idleClock ({now,
   * setTimeout, clearTimeout}; default the real ones).
   */
  constructor(opts) {
    if (!opts || !opts.user) throw new TypeError("RollcallClient: user is required");
    const urls = typeof opts.urls === "string" ? [opts.urls] : opts.urls || (opts.url ? [opts.url] : []);
    if (urls.length === 0) throw new TypeError("RollcallClient: urls is required");
    this.urls = urls.slice();
    this.user = opts.user;
    this.device = opts.device || "";
    this.tokenSource = opts.token || null;
    this.status = opts.status || "available";
    this.groups = new Set(opts.groups || []);
    this.meta = opts.meta || null;
    this.gatewayURL = opts.gatewayURL || (addr => (/^wss?:\/\//.test(addr) ? addr : null));
    this.onstate = opts.onstate || null;
    this.onmessage = opts.onmessage || null;
    this.WebSocket = opts.WebSocket || globalThis.WebSocket;
    this.state = "idle";
    this.epoch = 0;
    this.gateway = "";
    this.session = "";
    this.ws = null;
    this._next = 0; // index into urls
    this._hints = [];
    this._failures = 0;
    this._id = 0;
    this._pending = new Map();
    this._subs = new Set();
    this._versions = new Map(); // subject key => last delivered version
    this._timers = new Set();
    this._hb = null;
    this._live = null; // the welcomed WebSocket
    this._closing = false;
    this._ended = null; // "superseded" or "kicked": the session ended for good; stop, do not reconnect
    this.idleAfter = opts.idleAfter === undefined ? IDLE_AFTER_MS : opts.idleAfter;
    this._idleTarget = opts.idleTarget !== undefined ? opts.idleTarget
      : (globalThis.window && typeof globalThis.window.addEventListener === "function" ? globalThis.window : null);
    this._idleDoc = opts.idleDocument !== undefined ? opts.idleDocument : (globalThis.document || null);
    this._clock = opts.idleClock || realClock;
    this._idle = false;
    this._idleTimer = null;
    this._idleOn = false;
  }

  /** idle is true while the session shows away for idleness (setIdle or the idle timer). */
  get idle() { return this._idle; }

  /**
   * setIdle(true) shows the session away, keeping the status the app set;
   * setIdle(false) shows that status again. Setting the current state sends
   * nothing. Input ends idleness set by hand as well.
   */
  setIdle(idle) {
    idle = !!idle;
    if (idle === this._idle) return Promise.resolve({op: "ok"});
    this._idle = idle;
    return this.request({op: "status", status: this._shownStatus()}).catch(e => {
      if (this._idle === idle) this._idle = !idle;
      throw e;
    });
  }

  _shownStatus() { return this._idle ? "away" : this.status; }

  _idleStart() {
    if (this._idleOn || !(this.idleAfter > 0) || !this._idleTarget) return;
    this._idleOn = true;
    this._lastInput = this._clock.now();
    this._onInput = () => this._activity();
    for (const type of IDLE_INPUT) this._idleTarget.addEventListener(type, this._onInput, {capture: true, passive: true});
    if (this._idleDoc && typeof this._idleDoc.addEventListener === "function") {
      this._onVisibility = () => this._activity();
      this._idleDoc.addEventListener("visibilitychange", this._onVisibility);
    }
    this._idleArm(this.idleAfter);
  }

  _idleStop() {
    if (!this._idleOn) return;
    this._idleOn = false;
    for (const type of IDLE_INPUT) this._idleTarget.removeEventListener(type, this._onInput, {capture: true});
    if (this._onVisibility) this._idleDoc.removeEventListener("visibilitychange", this._onVisibility);
    if (this._idleTimer !== null) this._clock.clearTimeout(this._idleTimer);
    this._idleTimer = null;
  }

  // _activity: input, or the page shown again. A hidden page's time counts
  // as idle time.
  _activity() {
    if (!this._idleOn || (this._idleDoc && this._idleDoc.visibilityState === "hidden")) return;
    this._lastInput = this._clock.now();
    if (this._idle) this.setIdle(false).catch(() => {});
    if (this._idleTimer === null) this._idleArm(this.idleAfter);
  }

  _idleArm(ms) {
    this._idleTimer = this._clock.setTimeout(() => {
      this._idleTimer = null;
      if (!this._idleOn) return;
      const quiet = this._clock.now() - this._lastInput;
      if (quiet >= this.idleAfter) this.setIdle(true).catch(() => {}); // armed again by the next input
      else this._idleArm(this.idleAfter - quiet);
    }, ms);
  }

  _setState(state, info) {
    this.state = state;
    if (this.onstate) {
      try { this.onstate(state, info || {}); } catch (e) { setTimeout(() => { throw e; }); }
    }
  }

  _timer(ms, fn) {
    const t = setTimeout(() => { this._timers.delete(t); fn(); }, ms);
    this._timers.add(t);
    return t;
  }

  /**
   * connect resolves with the first welcome. It rejects when every URL
   * failed once, or when the first hello is refused (auth_failed,
   * bad_request, forbidden, epoch_exhausted, too_many_sessions).
   */
  connect() {
    if (this._connectPromise) return this._connectPromise;
    this._connectPromise = new Promise((resolve, reject) => {
      this._first = {resolve, reject, tries: 0};
    });
    this._idleStart();
    this._dial();
    return this._connectPromise;
  }

  _pickURL() {
    while (this._hints.length > 0) {
      const url = this.gatewayURL(this._hints.shift());
      if (url) return url;
    }
    const url = this.urls[this._next % this.urls.length];
    this._next++;
    return url;
  }

  async _dial() {
    if (this._closing) return;
    this._setState(this._first ? "connecting" : "reconnecting", {attempt: this._failures});
    const url = this._pickURL();
    let token;
    try {
      token = this.tokenSource ? await this.tokenSource() : undefined;
    } catch (e) {
      this._lost(null, new RollcallError("token", String(e && e.message || e)));
      return;
    }
    if (this._closing) return;
    let ws;
    try {
      ws = new this.WebSocket(url);
    } catch (e) {
      this._lost(null, new RollcallError("dial", String(e && e.message || e)));
      return;
    }
    this.ws = ws;
    this.url = url;
    let welcomed = false;
    let ended = false;
    const end = err => {
      if (ended) return;
      ended = true;
      this._stopConn(ws);
      this._lost(ws, err, welcomed);
    };
    ws.onopen = () => {
      const hello = {op: "hello", user: this.user, status: this._shownStatus(), protocol: PROTOCOL};
      if (this.device) hello.device = this.device;
      if (token) hello.token = token;
      if (this.epoch) hello.last_epoch = this.epoch;
      if (this.groups.size) hello.groups = [...this.groups];
      if (this.meta) hello.meta = this.meta;
      ws.send(JSON.stringify(hello));
    };
    ws.onmessage = e => {
      let m;
      try { m = JSON.parse(e.data); } catch { return; }
      if (!welcomed) {
        if (m.op === "welcome") {
          welcomed = true;
          this._welcome(ws, m);
        } else if (m.op === "error") {
          ws.onclose = null;
          try { ws.close(); } catch { /* already closing */ }
          end(new RollcallError(m.code, m.message, m));
        }
        return;
      }
      this._dispatch(ws, m, end);
    };
    ws.onerror = () => {}; // onclose follows
    ws.onclose = e => end(new RollcallError("disconnected", `connection closed (${e.code}${e.reason ? " " + e.reason : ""})`));
  }

  _welcome(ws, m) {
    this.epoch = m.epoch;
    this.device = m.device;
    this.gateway = m.gateway;
    this.session = m.session;
    this._failures = 0;
    this._live = ws;
    this._hb = setInterval(() => { if (this.ws === ws && ws.readyState === 1) ws.send('{"op":"hb"}'); }, m.heartbeat_ms || 5000);
    if (m.token_expires_at) this._scheduleRefresh(ws, m.token_expires_at);
    // Restore: subscriptions again, in chunks.
    for (const sub of this._subs) this._sendSub(sub);
    this._setState("connected", {gateway: m.gateway, url: this.url, epoch: m.epoch, session: m.session});
    if (this._first) {
      const f = this._first;
      this._first = null;
      f.resolve(m);
    }
  }

  _scheduleRefresh(ws, expiresAt) {
    const left = Date.parse(expiresAt) - Date.now();
    if (!(left > 0) || !this.tokenSource) return;
    this._timer(Math.max(1000, left * 2 / 3), async () => {
      if (this.ws !== ws || this._closing) return;
      try {
        const token = await this.tokenSource();
        const r = await this.request({op: "refresh", token});
        if (r.token_expires_at) this._scheduleRefresh(ws, r.token_expires_at);
      } catch { /* the session ends with token_expired and the client reconnects */ }
    });
  }

  _dispatch(ws, m, end) {
    switch (m.op) {
      case "event": this._event(m); return;
      case "message": if (this.onmessage) this.onmessage(m); return;
      case "error":
        if (m.id !== undefined && this._pending.has(m.id)) {
          this._settle(m.id, null, new RollcallError(m.code, m.message, m));
          return;
        }
        if (m.code === "superseded" || m.code === "kicked") {
          this._ended = m.code;
        } else if (m.code === "shutting_down" && Array.isArray(m.gateways)) {
          this._hints = m.gateways.slice();
          this._shutdown = true;
        }
        this._lastError = new RollcallError(m.code, m.message, m);
        return;
      default:
        if (m.id !== undefined && this._pending.has(m.id)) this._settle(m.id, m, null);
    }
  }

  _settle(id, reply, err) {
    const p = this._pending.get(id);
    this._pending.delete(id);
    if (err) p.reject(err); else p.resolve(reply);
  }

  _event(ev) {
    const key = ev.group !== undefined ? `g\u0000${ev.group}\u0000${ev.user}` : `u\u0000${ev.user}`;
    const last = this._versions.get(key);
    if (last !== undefined && !(ev.version > last)) return; // never go back in time
    this._versions.set(key, ev.version);
    for (const sub of this._subs) {
      const mine = ev.group !== undefined ? sub.group === ev.group : sub.users && sub.users.includes(ev.user);
      if (mine) {
        try { sub.handler(ev); } catch (e) { setTimeout(() => { throw e; }); }
      }
    }
  }

  _stopConn(ws) {
    if (this._hb) clearInterval(this._hb);
    this._hb = null;
    if (this.ws === ws) this.ws = null;
    if (this._live === ws) this._live = null;
    for (const [id, p] of this._pending) {
      this._pending.delete(id);
      if (RESTORED.has(p.op)) p.resolve({op: "ok", restored: true});
      else p.reject(new RollcallError("disconnected", "the connection ended before the reply"));
    }
  }

  _lost(ws, err, welcomed) {
    if (ws) this._stopConn(ws);
    if (this._closing) return;
    const why = this._lastError || err;
    this._lastError = null;
    if (this._ended) {
      this._stop(this._ended, why);
      return;
    }
    if (this._first) {
      this._first.tries++;
      const code = err && err.code;
      if (REFUSED.has(code) || this._first.tries >= this.urls.length) {
        const f = this._first;
        this._first = null;
        this._stop("closed", why);
        f.reject(why);
        return;
      }
    }
    if (this._shutdown && this._hints.length > 0) {
      this._shutdown = false;
      this._setState("reconnecting", {error: why, delay: 0});
      this._timer(0, () => this._dial());
      return;
    }
    this._shutdown = false;
    const delay = welcomed ? backoffDelay(0) : backoffDelay(this._failures);
    this._failures++;
    this._setState("reconnecting", {error: why, delay});
    this._timer(delay, () => this._dial());
  }

  _stop(state, err) {
    this._closing = true;
    this._idleStop();
    for (const t of this._timers) clearTimeout(t);
    this._timers.clear();
    this._setState(state, {error: err});
  }

  /** request sends one request and resolves with its reply (rejects with a RollcallError). */
  request(req) {
    const ws = this.ws;
    if (!ws || ws.readyState !== 1 || this._live !== ws) {
      if (RESTORED.has(req.op)) return Promise.resolve({op: "ok", restored: true});
      return Promise.reject(new RollcallError("disconnected", "not connected"));
    }
    const id = ++this._id;
    return new Promise((resolve, reject) => {
      this._pending.set(id, {resolve, reject, op: req.op});
      ws.send(JSON.stringify({...req, id}));
    });
  }

  /**
   * setStatus sets this device's status ("available", "away", "busy"); kept
   * across reconnects. While idle it only changes the status shown when
   * idleness ends (nothing is sent).
   */
  setStatus(status) {
    this.status = status;
    if (this._idle) return Promise.resolve({op: "ok", idle: true});
    return this.request({op: "status", status});
  }

  join(group) { this.groups.add(group); return this.request({op: "join", group}); }
  leave(group) { this.groups.delete(group); return this.request({op: "leave", group}); }
  get(users) { return this.request({op: "get", users}); }
  /**
   * groupPage resolves to one page of a group's online members, in user-name
   * order: {group, online, members, next}. opts: limit (at most that many
   * members; 0: the count only), cursor (a page's next; absent: from the
   * first). next is "" after the last page.
   */
  groupPage(group, opts = {}) {
    const req = {op: "group", group};
    if (opts.limit !== undefined) req.limit = opts.limit;
    if (opts.cursor) req.cursor = opts.cursor;
    return this.request(req);
  }

  /**
   * groupMembers resolves to every online member of a group, all pages read
   * (opts.limit members a page): {group, online, members}.
   */
  async groupMembers(group, opts = {}) {
    const out = {group, online: 0, members: []};
    let cursor = "";
    for (;;) {
      const page = await this.groupPage(group, {limit: opts.limit, cursor});
      out.online = page.online;
      out.members.push(...page.members);
      if (!page.next) return out;
      cursor = page.next;
    }
  }

  /** groupCount resolves to how many members of a group are online. */
  async groupCount(group) { return (await this.groupPage(group, {limit: 0})).online; }
  send(to, body) { return this.request({op: "send", to, body}); }
  /**
   * account changes account settings: {override (none, away, dnd, busy or
   * invisible), authoritative_device, text, emoji, until}; absent ones are
   * left as they are, "" clears.
   */
  account(settings) { return this.request({op: "account", ...settings}); }

  /**
   * setStatusText sets the status text and emoji, lapsing at until (a Date
   * or RFC 3339 string; absent or null: never).
   */
  setStatusText(text, emoji = "", until = null) {
    const u = until instanceof Date ? until.toISOString() : (until || "");
    return this.account({text, emoji, until: u});
  }

  /**
   * setInvisible sets the account override to invisible (true) or none
   * (false, replacing any other override). While invisible, every reader but
   * the user and backends sees the user offline; the user's own events and
   * reads carry the truth with invisible: true. Messages still flow.
   */
  setInvisible(on) { return this.account({override: on ? "invisible" : "none"}); }

  /** setMeta sets this session's meta (an object; null clears); kept across reconnects. */
  setMeta(meta) {
    return this.request({op: "meta", meta: meta || {}}).then(r => { this.meta = meta || null; return r; });
  }

  /** subscribe calls handler with every event of the users, restored after reconnects. */
  subscribe(users, handler) {
    const sub = new Subscription(this, users.slice(), undefined, handler);
    this._subs.add(sub);
    if (this._live) this._sendSub(sub);
    return sub;
  }

  /** subscribeGroup calls handler with every event of the group's members (ev.member: in or out). */
  subscribeGroup(group, handler) {
    const sub = new Subscription(this, null, group, handler);
    this._subs.add(sub);
    if (this._live) this._sendSub(sub);
    return sub;
  }

  _sendSub(sub) {
    if (sub.group !== undefined) {
      this.request({op: "sub", group: sub.group}).catch(e => this._subError(sub, e));
      return;
    }
    for (let i = 0; i < sub.users.length; i += SUB_CHUNK) {
      this.request({op: "sub", users: sub.users.slice(i, i + SUB_CHUNK)}).catch(e => this._subError(sub, e));
    }
  }

  _subError(sub, e) {
    if (sub.onerror) sub.onerror(e);
  }

  _unsubscribe(sub) {
    this._subs.delete(sub);
    if (sub.group !== undefined) {
      if ([...this._subs].some(s => s.group === sub.group)) return Promise.resolve();
      return this.request({op: "unsub", group: sub.group}).catch(() => {});
    }
    const still = new Set();
    for (const s of this._subs) if (s.users) for (const u of s.users) still.add(u);
    const gone = sub.users.filter(u => !still.has(u));
    if (gone.length === 0) return Promise.resolve();
    for (const u of gone) this._versions.delete(`u\u0000${u}`);
    return this.request({op: "unsub", users: gone}).catch(() => {});
  }

  /** close says bye, waits for its reply or the connection's end (at most 2 s), and stops. */
  async close() {
    if (this._closing) return;
    this._idleStop();
    const ws = this.ws;
    const first = this._first;
    this._first = null;
    if (ws && this._live === ws) {
      const done = new Promise(resolve => {
        const prev = ws.onclose;
        ws.onclose = e => { if (prev) prev(e); resolve(); };
        this.request({op: "bye"}).then(resolve, resolve);
        setTimeout(resolve, 2000);
      });
      this._closing = true;
      await done;
    }
    this._stop("closed", null);
    if (ws) {
      this._stopConn(ws);
      try { ws.close(1000); } catch { /* already closed */ }
    }
    if (first) first.reject(new RollcallError("closed", "closed before connecting"));
  }
}
