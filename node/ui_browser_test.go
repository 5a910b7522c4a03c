package node

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/rollcall/rollcall/crdt"
)

// The status page in a real browser: headless Chromium driven over the
// DevTools protocol (chromedp). The test skips, saying so, where no
// Chromium is installed (.ci/run installs Debian's chromium).

// chromiumNames are the binaries the browser test looks for in PATH.
var chromiumNames = []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless-shell"}

// chromiumPath returns the Chromium to drive: $ROLLCALL_CHROMIUM, or the
// first of chromiumNames in PATH; empty when there is none.
func chromiumPath() string {
	if p := os.Getenv("ROLLCALL_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range chromiumNames {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// browserTab is one tab of a headless Chromium, with the uncaught
// JavaScript exceptions its pages threw.
type browserTab struct {
	t   *testing.T
	ctx context.Context

	mu         sync.Mutex
	exceptions []string
}

// newBrowser starts a headless Chromium for the test, or skips the test.
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	exe := chromiumPath()
	if exe == "" {
		t.Skipf("SKIP: no Chromium found (looked for $ROLLCALL_CHROMIUM and %s in PATH); "+
			"install Debian's chromium (apt-get install chromium) to run the status page's browser test",
			strings.Join(chromiumNames, ", "))
	}
	// Not t.TempDir: Chromium's helper processes can still write there for
	// a moment after the browser exits, which would fail the test's
	// cleanup. Removal is retried, then left to the system.
	profile, err := os.MkdirTemp("", "rollcall-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe),
		chromedp.NoSandbox, // CI runs as root
		chromedp.DisableGPU,
		chromedp.UserDataDir(profile),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancelBrowser()
		cancelAlloc()
		for range 50 {
			if os.RemoveAll(profile) == nil {
				return
			}
			time.Sleep(100 * time.Millisecond) // retrying a removal, not waiting for a test condition
		}
	})
	// Start the browser on a context without a deadline: it lives as long
	// as that context.
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("start %s: %v", exe, err)
	}
	return bctx
}

// newTab opens a tab that records uncaught exceptions and fails the test
// on any when the test ends.
func newTab(t *testing.T, browser context.Context) *browserTab {
	t.Helper()
	ctx, cancel := chromedp.NewContext(browser)
	ctx, cancelTimeout := context.WithTimeout(ctx, 2*time.Minute)
	tab := &browserTab{t: t, ctx: ctx}
	exceptions := chromedp.Events(ctx, runtime.ExceptionThrown)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev, err := range exceptions {
			if err != nil {
				return
			}
			tab.mu.Lock()
			tab.exceptions = append(tab.exceptions, (&chromedp.ExceptionError{ExceptionDetails: ev.ExceptionDetails}).Error())
			tab.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		tab.mu.Lock()
		exc := tab.exceptions
		tab.mu.Unlock()
		cancelTimeout()
		cancel()
		<-done
		if len(exc) > 0 {
			t.Errorf("the page threw: %s", strings.Join(exc, "\n"))
		}
	})
	return tab
}

func (b *browserTab) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, steps...); err != nil {
		b.t.Fatalf("%s: %v\npage: %s", what, err, b.text())
	}
}

// text returns the page's visible text, for failure messages.
func (b *browserTab) text() string {
	ctx, cancel := context.WithTimeout(b.ctx, 2*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
	if err != nil {
		return "(unreadable: " + err.Error() + ")"
	}
	return s
}

// eval evaluates a JavaScript expression.
func eval[T any](b *browserTab, expr string) T {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// waitUntil waits, up to 30s, until the JavaScript expression is truthy.
func (b *browserTab) waitUntil(what, expr string) {
	b.t.Helper()
	_, err := chromedp.Run(b.ctx, chromedp.Poll[bool]("!!("+expr+")",
		chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(30*time.Second)))
	if err != nil {
		b.t.Fatalf("waiting for %s (%s): %v\npage: %s", what, expr, err, b.text())
	}
}

// jsConn is the page's connection state.
const jsConn = `document.getElementById('conn').dataset.state`

// jsString is s as a JavaScript string literal.
func jsString(s string) string {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err) // a string always encodes
	}
	return string(b)
}

// jsRow is the first row of a table whose data-key is value: for the
// events table, newest first, the user's latest change.
func jsRow(table, key, value string) string {
	return fmt.Sprintf(`[...document.querySelectorAll('#%s tbody tr')].find(r => r.dataset.%s === %s)`, table, key, jsString(value))
}

func jsGatewayCount(gateway string, n int) string {
	return fmt.Sprintf(`((r) => r && r.dataset.count === '%d')(%s)`, n, jsRow("gateways", "gateway", gateway))
}

func jsNewestEvent(user, status string) string {
	return fmt.Sprintf(`((r) => r && r.dataset.status === %s)(%s)`, jsString(status), jsRow("events", "user", user))
}

// streamGate is a UIAuth for the test: the admin token check, as the agent
// does it, plus a switch that cuts the status streams off (a proxy
// restarting, a network drop) and refuses them until it is switched back.
type streamGate struct {
	token string
	cut   atomic.Bool

	mu      sync.Mutex
	streams map[*context.CancelFunc]struct{}
}

func (g *streamGate) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+g.token {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		if g.cut.Load() {
			http.Error(w, "cut off", http.StatusBadGateway)
			return
		}
		ctx, cancel := context.WithCancel(r.Context())
		g.mu.Lock()
		g.streams[&cancel] = struct{}{}
		g.mu.Unlock()
		defer func() {
			g.mu.Lock()
			delete(g.streams, &cancel)
			g.mu.Unlock()
			cancel()
		}()
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}

// cutOff ends every open request and refuses new ones until restore.
func (g *streamGate) cutOff() {
	g.cut.Store(true)
	g.mu.Lock()
	defer g.mu.Unlock()
	for cancel := range g.streams {
		(*cancel)()
	}
}

func (g *streamGate) restore() { g.cut.Store(false) }

// TestStatusPageInBrowser opens /ui in headless Chromium and checks what an
// operator sees: the token form, the members table and per-gateway counts
// with thousands of sessions, a client's status change and disconnect
// arriving live, a dropped stream shown and reconnected, and a standalone
// gateway.
func TestStatusPageInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIP: -short: the browser test starts Chromium")
	}
	browser := newBrowser(t)

	t.Run("cluster", func(t *testing.T) {
		gate := &streamGate{token: "op-token", streams: make(map[*context.CancelFunc]struct{})}
		fm := &fakeMembership{members: []MemberState{
			{Name: "n1", State: "alive", ClientAddr: "10.0.0.1:7400", Self: true},
			{Name: "n2", State: "alive", ClientAddr: "10.0.0.2:7400", Sessions: 3000},
			{Name: "n3", State: "dead", ClientAddr: "10.0.0.3:7400", LeaseExpired: true},
		}}
		n := uiNode(t, func(c *Config) {
			c.Cluster = fm
			c.UIAuth = gate.wrap
			c.UIKeepAlive = time.Second
		})
		// Thousands of sessions on n2, one of them a user whose name is markup.
		rm := newRemote(t, "n2")
		const remote = 3000
		deltas := make([]crdt.Delta, 0, remote)
		for i := range remote - 1 {
			deltas = append(deltas, rm.put(fmt.Sprintf("user%04d", i), "phone", 1, crdt.StateActive, crdt.StatusAvailable))
		}
		if err := n.ApplyDeltas(deltas); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the remote sessions in the feed", func() bool { return n.feed.stats().Recorded == remote-1 })
		const markup = `<img src=x onerror="window.injected=1">`
		if err := n.ApplyDeltas([]crdt.Delta{rm.put(markup, "phone", 1, crdt.StateActive, crdt.StatusAway)}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the markup user in the feed", func() bool { return n.feed.stats().Recorded == remote })

		tab := newTab(t, browser)
		tab.do("open /ui", chromedp.Navigate("http://"+n.HTTPAddr().String()+"/ui"))
		tab.waitUntil("the token form", `!document.getElementById('token-form').hidden && `+jsConn+` === 'auth'`)

		tab.do("a wrong token", chromedp.SetValue(chromedp.ID("token"), "not-it"), chromedp.Click(chromedp.CSS("#token-form button")))
		tab.waitUntil("the wrong token refused", `document.getElementById('token-msg').textContent.includes('refused') && !document.getElementById('token-form').hidden`)

		tab.do("the token", chromedp.SetValue(chromedp.ID("token"), "op-token"), chromedp.Click(chromedp.CSS("#token-form button")))
		tab.waitUntil("the stream live", jsConn+` === 'live'`)
		tab.waitUntil("the members table", `document.querySelectorAll('#members tbody tr').length === 3`)
		if got := eval[string](tab, `[...document.querySelectorAll('#members tbody tr')].map(r => r.dataset.name + ' ' + r.dataset.state + ' ' + r.cells[2].textContent).join('; ')`); got != "n1 alive 10.0.0.1:7400; n2 alive 10.0.0.2:7400; n3 dead 10.0.0.3:7400" {
			t.Fatalf("members table: %q", got)
		}
		tab.waitUntil("n2's 3000 sessions counted", jsGatewayCount("n2", remote))
		tab.waitUntil("the recent events", `document.querySelectorAll('#events tbody tr').length > 0`)
		if rows := eval[int](tab, `document.querySelectorAll('#events tbody tr').length`); rows > 200 {
			t.Fatalf("the events table has %d rows; want the recent ones, at most 200", rows)
		}
		if stored, url := eval[string](tab, `sessionStorage.getItem('rollcall.adminToken')`), eval[string](tab, `location.href`); stored != "op-token" || strings.Contains(url, "op-token") {
			t.Fatalf("token stored %q, page URL %q: want it in session storage and never in the URL", stored, url)
		}
		// The markup user is text on the page, never markup.
		tab.waitUntil("the markup user's row", jsRow("events", "user", markup))
		if got := eval[string](tab, jsRow("events", "user", markup)+`.cells[1].textContent`); got != markup {
			t.Fatalf("markup user shown as %q", got)
		}
		if eval[bool](tab, `window.injected === 1 || document.querySelector('#events img') !== null`) {
			t.Fatal("a user name was rendered as HTML")
		}

		// A client connects, changes status, and goes: each shows live.
		a, _ := connect(t, n, "alice", "phone")
		tab.waitUntil("alice online", jsNewestEvent("alice", "available"))
		a.ok(map[string]any{"op": "status", "status": "away"})
		tab.waitUntil("alice away", jsNewestEvent("alice", "away"))
		a.ok(map[string]any{"op": "account", "text": "on a call", "emoji": "📞"})
		tab.waitUntil("alice's status text", fmt.Sprintf(`((r) => r && r.cells[3].textContent === %s)(%s)`,
			jsString("📞 on a call"), jsRow("events", "user", "alice")))
		tab.waitUntil("n1's session counted", jsGatewayCount("n1", 1))
		a.nc.Close()
		tab.waitUntil("alice offline", jsNewestEvent("alice", "offline"))
		seen := presenceOf(n, "alice").LastSeen
		if seen == 0 {
			t.Fatal("alice offline without a last seen")
		}
		tab.waitUntil("alice's last seen", fmt.Sprintf(`((r) => r && r.dataset.lastSeen === %s && /^offline, last seen \d\d:\d\d:\d\d\.\d{3}$/.test(r.cells[2].textContent))(%s)`,
			jsString(n.formatTime(time.Unix(0, seen))), jsRow("events", "user", "alice")))
		tab.waitUntil("n1's session gone", jsGatewayCount("n1", 0))

		// The stream drops: the page says so, backs off, and comes back.
		gate.cutOff()
		tab.waitUntil("the drop shown", jsConn+` === 'down' && document.getElementById('conn').textContent.includes('reconnecting in')`)
		gate.restore()
		tab.waitUntil("the stream back", jsConn+` === 'live'`)
		connect(t, n, "bob", "desk")
		tab.waitUntil("bob online after the reconnect", jsNewestEvent("bob", "available"))

		// Nothing was fetched from anywhere but the gateway.
		origin := "http://" + n.HTTPAddr().String()
		if foreign := eval[[]string](tab, fmt.Sprintf(`performance.getEntriesByType('resource').map(e => e.name).filter(u => !u.startsWith(%q))`, origin+"/")); len(foreign) > 0 {
			t.Fatalf("the page fetched from elsewhere: %v", foreign)
		}
	})

	t.Run("regions", func(t *testing.T) {
		n := uiNode(t, func(c *Config) {
			c.Cluster = &fakeRegions{fakeMembership: fakeMembership{members: []MemberState{{Name: "n1", State: "alive", Self: true}}},
				status: testRegionStatus}
		})
		tab := newTab(t, browser)
		tab.do("open /ui/", chromedp.Navigate("http://"+n.HTTPAddr().String()+"/ui/"))
		tab.waitUntil("the other regions", `!document.getElementById('regions-section').hidden && document.querySelectorAll('#regions tbody tr').length === 2`)
		if got := eval[string](tab, `[...document.querySelectorAll('#regions tbody tr')].map(r => [...r.cells].map(c => c.textContent).join('|')).join('; ')`); got != "ap|ap0|2|expired, sessions shown expired|12.5 s ago; us|us1|3|up|0.3 s ago" {
			t.Fatalf("regions table: %q", got)
		}
		if got := eval[string](tab, `document.getElementById('regions-note').textContent`); !strings.Contains(got, "region eu") ||
			!strings.Contains(got, "active bridge: n2") || !strings.Contains(got, "Seeing no other region over the WAN pool: n1") {
			t.Fatalf("regions note: %q", got)
		}
	})

	t.Run("standalone", func(t *testing.T) {
		n := uiNode(t, nil)
		connect(t, n, "carol", "phone")
		tab := newTab(t, browser)
		tab.do("open /ui/", chromedp.Navigate("http://"+n.HTTPAddr().String()+"/ui/"))
		tab.waitUntil("the stream live", jsConn+` === 'live'`)
		tab.waitUntil("the standalone note", `!document.getElementById('standalone').hidden`)
		tab.waitUntil("itself as the only member", fmt.Sprintf(`((rows) => rows.length === 1 && rows[0].dataset.name === 'n1' && rows[0].cells[2].textContent === %q)(document.querySelectorAll('#members tbody tr'))`,
			n.ClientAddr().String()))
		tab.waitUntil("carol's session counted", jsGatewayCount("n1", 1))
		tab.waitUntil("carol's event from the snapshot", jsNewestEvent("carol", "available"))
		if !eval[bool](tab, `document.getElementById('token-form').hidden`) {
			t.Fatal("the page asked for a token where none is configured")
		}
		if !eval[bool](tab, `document.getElementById('regions-section').hidden`) {
			t.Fatal("a single-region gateway shows an Other regions section")
		}
	})
}
