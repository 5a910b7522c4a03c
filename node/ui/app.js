// Rollcall status page. Plain JavaScript, no dependencies, nothing fetched
// from anywhere but this gateway.
//
// It reads two endpoints relative to the page (served at /ui/):
//   ../v1/ui/summary  members, session counts and (several regions) the
//                     other regions, reloaded after events
//                     and every SUMMARY_POLL_MS
//   ../v1/ui/events   server-sent events, read with fetch() so that the
//                     admin token can travel in an Authorization header
//                     (EventSource cannot send headers)
// A 401 or 403 from either shows a form asking for the admin token, which
// is kept in sessionStorage (this tab only), never in the URL.
'use strict';

(() => {
  const TOKEN_KEY = 'rollcall.adminToken';
  const MAX_EVENTS = 200; // rows kept on the page
  const RENDER_EVERY_MS = 100; // events arriving faster are drawn together
  const SUMMARY_POLL_MS = 10000;
  const SUMMARY_AFTER_EVENT_MS = 300;
  const CONNECT_TIMEOUT_MS = 15000;
  const BACKOFF_MIN_MS = 1000;
  const BACKOFF_MAX_MS = 30000;

  const summaryURL = new URL('../v1/ui/summary', document.baseURI);
  const eventsURL = new URL('../v1/ui/events', document.baseURI);
  const $ = (id) => document.getElementById(id);

  const state = {
    token: sessionStorage.getItem(TOKEN_KEY) || '',
    needToken: false,
    streaming: false,
    abort: null, // AbortController of the open stream
    events: [], // newest first, at most MAX_EVENTS
    missed: 0, // events the server could not queue to this page
    summaryTimer: null,
    renderTimer: null,
  };

  function authHeaders() {
    return state.token ? { Authorization: 'Bearer ' + state.token } : {};
  }

  function setConn(kind, text) {
    const el = $('conn');
    el.dataset.state = kind;
    el.textContent = text;
  }

  // --- the admin token -------------------------------------------------

  function askToken(message) {
    if (state.needToken) return;
    state.needToken = true;
    if (state.abort) state.abort.abort(new Error('signed out'));
    $('token-form').hidden = false;
    $('main').hidden = true;
    $('forget-token').hidden = true;
    $('token-msg').textContent = message;
    $('token').focus();
    setConn('auth', 'admin token required');
  }

  // unauthorized handles a 401 or 403 from a data endpoint: a token that
  // was refused is forgotten, and the form asks for one, with the
  // gateway's reason when it gives one (a 403 says why no token can help).
  async function unauthorized(resp) {
    let reason = '';
    try {
      reason = (await resp.json()).error || '';
    } catch (err) {
      // not JSON: keep the generic message
    }
    let message = state.token ? 'The gateway refused that token.' : 'This gateway needs its admin token.';
    if (resp.status === 403 && reason) message = 'The gateway refused: ' + reason;
    if (state.token) {
      state.token = '';
      sessionStorage.removeItem(TOKEN_KEY);
    }
    askToken(message);
  }

  $('token-form').addEventListener('submit', (e) => {
    e.preventDefault();
    const token = $('token').value.trim();
    if (!token) {
      $('token-msg').textContent = 'Enter the admin token.';
      return;
    }
    $('token').value = '';
    state.token = token;
    sessionStorage.setItem(TOKEN_KEY, token);
    state.needToken = false;
    $('token-form').hidden = true;
    $('main').hidden = false;
    start();
  });

  $('forget-token').addEventListener('click', () => {
    state.token = '';
    sessionStorage.removeItem(TOKEN_KEY);
    askToken('Token forgotten.');
  });

  // --- the summary -----------------------------------------------------

  function scheduleSummary(delay) {
    if (state.summaryTimer !== null || state.needToken) return;
    state.summaryTimer = setTimeout(() => {
      state.summaryTimer = null;
      loadSummary();
    }, delay);
  }

  async function loadSummary() {
    if (state.needToken) return;
    let resp;
    try {
      resp = await fetch(summaryURL, { headers: authHeaders(), cache: 'no-store' });
    } catch (err) {
      showSummaryError('The gateway did not answer: ' + err.message);
      return;
    }
    if (resp.status === 401 || resp.status === 403) {
      await unauthorized(resp);
      return;
    }
    if (!resp.ok) {
      showSummaryError('The summary failed: HTTP ' + resp.status);
      return;
    }
    try {
      renderSummary(await resp.json());
      showSummaryError('');
    } catch (err) {
      showSummaryError('The summary could not be read: ' + err.message);
    }
  }

  function showSummaryError(text) {
    $('summary-error').textContent = text;
    $('summary-error').hidden = !text;
  }

  function cell(text, className) {
    const td = document.createElement('td');
    td.textContent = text; // never innerHTML: names come from clients
    if (className) td.className = className;
    return td;
  }

  function count(n) {
    return Number(n).toLocaleString();
  }

  function renderSummary(s) {
    $('node').textContent = s.node;
    document.title = 'Rollcall status: ' + s.node;
    $('sessions-total').textContent = count(s.sessions);
    $('sessions-local').textContent = count(s.local_sessions);
    $('connections').textContent = count(s.connections);
    $('members-count').textContent = count(s.members.length);
    $('standalone').hidden = !s.standalone;
    $('draining').hidden = !s.draining;
    $('forget-token').hidden = !state.token;

    const members = document.createElement('tbody');
    for (const m of s.members) {
      const tr = document.createElement('tr');
      tr.dataset.name = m.name;
      tr.dataset.state = m.state;
      if (m.self) tr.className = 'local';
      tr.append(
        cell(m.self ? m.name + ' (this gateway)' : m.name),
        cell(m.lease_expired ? m.state + ', sessions shown expired' : m.state, 'state-' + m.state),
        cell(m.client_addr || '–'),
        cell(count(m.sessions), 'num'),
      );
      members.append(tr);
    }
    $('members').tBodies[0].replaceWith(members);

    const gateways = document.createElement('tbody');
    for (const g of s.gateways) {
      const tr = document.createElement('tr');
      tr.dataset.gateway = g.gateway;
      tr.dataset.count = String(g.sessions);
      if (g.self) tr.className = 'local';
      tr.append(cell(g.self ? g.gateway + ' (this gateway)' : g.gateway), cell(count(g.sessions), 'num'));
      gateways.append(tr);
    }
    $('gateways').tBodies[0].replaceWith(gateways);
    renderRegions(s.regions);
    if (s.feed) renderFeedNote(s.feed);
  }

  // renderRegions shows the other regions of a multi-region cluster; in a
  // single-region one the summary has no regions and the section stays
  // hidden.
  function renderRegions(r) {
    $('regions-section').hidden = !r;
    if (!r) return;
    let note = 'This gateway is of region ' + r.region + '; its active bridge: ' + (r.active_bridge || 'none known') + '.';
    const cut = r.bridges.filter((b) => b.reported && b.reach.length === 0).map((b) => b.name);
    if (cut.length) note += ' Seeing no other region over the WAN pool: ' + cut.join(', ') + '.';
    $('regions-note').textContent = note;
    const body = document.createElement('tbody');
    for (const o of r.others) {
      const tr = document.createElement('tr');
      tr.dataset.region = o.region;
      tr.dataset.lease = o.lease;
      tr.append(
        cell(o.region),
        cell(o.bridge || '–'),
        cell(count(o.gateways), 'num'),
        cell(o.lease === 'expired' ? 'expired, sessions shown expired' : o.lease, 'lease-' + o.lease),
        cell(o.heard_ago_ms < 0 ? 'never' : (o.heard_ago_ms / 1000).toFixed(1) + ' s ago'),
      );
      body.append(tr);
    }
    $('regions').tBodies[0].replaceWith(body);
  }

  function renderFeedNote(feed) {
    $('events-note').textContent =
      'The last ' + count(Math.min(MAX_EVENTS, feed.size, feed.recorded)) + ' changes this gateway saw, newest first (' +
      count(feed.recorded) + ' since it started).';
  }

  // --- events ----------------------------------------------------------

  function scheduleRender() {
    if (state.renderTimer !== null) return;
    state.renderTimer = setTimeout(() => {
      state.renderTimer = null;
      renderEvents();
    }, RENDER_EVERY_MS);
  }

  function timeOf(iso) {
    const d = new Date(iso);
    return isNaN(d) ? iso : d.toLocaleTimeString(undefined, { hour12: false }) + '.' + String(d.getMilliseconds()).padStart(3, '0');
  }

  function renderEvents() {
    const body = document.createElement('tbody');
    for (const e of state.events) {
      const tr = document.createElement('tr');
      tr.dataset.user = e.user;
      tr.dataset.status = e.status;
      tr.dataset.version = String(e.version);
      if (e.last_seen) tr.dataset.lastSeen = e.last_seen;
      if (e.local) tr.className = 'local';
      tr.append(
        cell(timeOf(e.time)),
        cell(e.user, 'user'),
        cell(e.status + (e.last_seen ? ', last seen ' + timeOf(e.last_seen) : ''), 'status-' + e.status),
        cell([e.emoji, e.text].filter(Boolean).join(' '), 'text'),
        cell(count(e.sessions), 'num'),
        cell((e.gateways || []).join(', ')),
        cell(String(e.version), 'num'),
      );
      body.append(tr);
    }
    $('events').tBodies[0].replaceWith(body);
    const dropped = $('events-dropped');
    dropped.hidden = state.missed === 0;
    dropped.textContent = state.missed === 0 ? '' :
      count(state.missed) + ' events were not sent to this page because it read them too slowly; the counts above are current.';
  }

  function handleEvent(name, data) {
    switch (name) {
      case 'snapshot':
        $('node').textContent = data.node;
        state.events = data.events.slice(-MAX_EVENTS).reverse();
        renderFeedNote(data.feed);
        scheduleRender();
        return;
      case 'presence':
        state.events.unshift(data);
        if (state.events.length > MAX_EVENTS) state.events.length = MAX_EVENTS;
        scheduleRender();
        scheduleSummary(SUMMARY_AFTER_EVENT_MS);
        return;
      case 'dropped':
        state.missed += data.dropped;
        scheduleRender();
        scheduleSummary(0);
        return;
    }
  }

  // parseBlock turns one server-sent event block into {name, data}; null
  // for a comment (keep-alive) or a block without data.
  function parseBlock(block) {
    let name = 'message';
    const data = [];
    for (const line of block.split('\n')) {
      if (line === '' || line.startsWith(':')) continue;
      const colon = line.indexOf(':');
      const field = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? '' : line.slice(colon + 1);
      if (value.startsWith(' ')) value = value.slice(1);
      if (field === 'event') name = value;
      else if (field === 'data') data.push(value);
    }
    return data.length ? { name, data: data.join('\n') } : null;
  }

  function backoff(attempt) {
    const base = Math.min(BACKOFF_MAX_MS, BACKOFF_MIN_MS * 2 ** (attempt - 1));
    return Math.round(base * (0.8 + 0.4 * Math.random()));
  }

  function waitRetry(delay, reason, attempt) {
    return new Promise((resolve) => {
      const until = Date.now() + delay;
      const tick = () => {
        if (state.needToken) return resolve();
        const left = until - Date.now();
        if (left <= 0) return resolve();
        setConn('down', reason + '; reconnecting in ' + Math.ceil(left / 1000) + ' s (attempt ' + attempt + ')');
        setTimeout(tick, Math.min(left, 1000));
      };
      tick();
    });
  }

  // readStream reads one connection to the events endpoint until it ends,
  // and returns why it ended. It throws on network errors and aborts.
  async function readStream(ac, onLive) {
    let idle = null;
    let idleMs = CONNECT_TIMEOUT_MS;
    const arm = () => {
      clearTimeout(idle);
      idle = setTimeout(() => ac.abort(new Error('the stream went silent')), idleMs);
    };
    arm();
    try {
      const resp = await fetch(eventsURL, { headers: authHeaders(), cache: 'no-store', signal: ac.signal });
      if (resp.status === 401 || resp.status === 403) {
        await unauthorized(resp);
        return 'unauthorized';
      }
      if (!resp.ok || !resp.body) return 'the gateway answered HTTP ' + resp.status;
      const reader = resp.body.getReader();
      const decoder = new TextDecoder();
      let buf = '';
      let ended = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return ended || 'the stream ended';
        arm();
        buf += decoder.decode(value, { stream: true }).replace(/\r\n?/g, '\n');
        let sep;
        while ((sep = buf.indexOf('\n\n')) >= 0) {
          const ev = parseBlock(buf.slice(0, sep));
          buf = buf.slice(sep + 2);
          if (!ev) continue;
          const data = JSON.parse(ev.data);
          if (ev.name === 'snapshot') {
            // A keep-alive comes every keep_alive_ms: three missed ones
            // mean the connection is dead even if TCP has not noticed.
            idleMs = Math.max(3 * (data.keep_alive_ms || 15000), 3000);
            arm();
            onLive();
          }
          if (ev.name === 'end') ended = 'the gateway is ' + (data.reason || 'closing');
          handleEvent(ev.name, data);
        }
      }
    } finally {
      clearTimeout(idle);
    }
  }

  async function runStream() {
    if (state.streaming) return;
    state.streaming = true;
    let attempt = 0;
    try {
      while (!state.needToken) {
        const ac = new AbortController();
        state.abort = ac;
        setConn('connecting', attempt ? 'reconnecting (attempt ' + (attempt + 1) + ')…' : 'connecting…');
        let reason;
        try {
          reason = await readStream(ac, () => {
            attempt = 0;
            setConn('live', 'live');
            scheduleSummary(0);
          });
        } catch (err) {
          reason = (ac.signal.aborted && ac.signal.reason && ac.signal.reason.message) || 'the connection failed';
        }
        if (state.needToken) return;
        attempt++;
        await waitRetry(backoff(attempt), reason, attempt);
      }
    } finally {
      state.streaming = false;
      state.abort = null;
    }
  }

  function start() {
    loadSummary();
    runStream();
  }

  setInterval(() => scheduleSummary(0), SUMMARY_POLL_MS);
  start();
})();
