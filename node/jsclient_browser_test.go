package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/rollcall/rollcall/node"
)

// demoTab is a headless Chromium tab on the demo page (/demo/).
type demoTab struct {
	t      *testing.T
	name   string
	ctx    context.Context
	cancel context.CancelFunc
}

func openDemo(t *testing.T, browser context.Context, page string) *demoTab {
	t.Helper()
	ctx, cancel := chromedp.NewContext(browser)
	tab := &demoTab{t: t, name: page, ctx: ctx, cancel: cancel}
	t.Cleanup(cancel)
	// The first Run opens the tab, which lives as long as ctx: no timeout on it.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("open a tab: %v", err)
	}
	nctx, ncancel := context.WithTimeout(ctx, jsWait)
	defer ncancel()
	if _, err := chromedp.Run(nctx, chromedp.Navigate(page)); err != nil {
		t.Fatalf("open %s: %v", page, err)
	}
	return tab
}

// waitUntil evaluates the expression until it is true, for at most jsWait.
func (d *demoTab) waitUntil(what, expr string) {
	d.t.Helper()
	deadline := time.Now().Add(jsWait)
	var last string
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(d.ctx, 2*time.Second)
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool]("!!("+expr+")"))
		cancel()
		if err == nil && ok {
			return
		}
		if err != nil {
			last = err.Error()
		}
		time.Sleep(20 * time.Millisecond) // polling a condition, bounded by deadline
	}
	ctx, cancel := context.WithTimeout(d.ctx, 2*time.Second)
	defer cancel()
	text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
	d.t.Fatalf("%s: no %s within %v (last error: %s)\npage: %s", d.name, what, jsWait, last, text)
}

func (d *demoTab) eval(expr string) {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(d.ctx, jsWait)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](expr)); err != nil {
		d.t.Fatalf("%s: %s: %v", d.name, expr, err)
	}
}

func jsConnectedTo(gateway string) string {
	return fmt.Sprintf(`((s) => s.dataset.state === 'connected' && s.dataset.gateway === %q)(document.getElementById('state'))`, gateway)
}

func jsRosterStatus(user, status string) string {
	return fmt.Sprintf(`((r) => r && r.dataset.status === %q)([...document.querySelectorAll('#roster li')].find(li => li.dataset.user === %q))`, status, user)
}

// TestJSClientInBrowser: the demo page in two headless Chromium tabs, on
// two gateways of a cluster. A's status change and status text show in
// B's roster; closing tab A shows A offline in B, with her status text and
// when she was last seen; when B's gateway goes, B reconnects to the other
// gateway and stays online there.
func TestJSClientInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIP: -short: the browser test starts Chromium and a gossip cluster")
	}
	browser := node.NewBrowser(t)
	gs := startJSCluster(t, 2)
	g0, g1 := gs[0], gs[1]
	demo := func(g *jsGateway, user, urls string) string {
		return fmt.Sprintf("http://%s/demo/?user=%s&group=team&device=web&url=%s", g.GW.HTTPAddr(), user, urls)
	}

	b := openDemo(t, browser, demo(g1, "bob", g1.WS()+","+g0.WS()))
	b.waitUntil("bob connected to g1", jsConnectedTo("g1"))
	b.waitUntil("bob in his roster", jsRosterStatus("bob", "available"))

	a := openDemo(t, browser, demo(g0, "alice", g0.WS()))
	a.waitUntil("alice connected to g0", jsConnectedTo("g0"))
	b.waitUntil("alice online in bob's roster", jsRosterStatus("alice", "available"))

	a.eval(`((s) => { s.value = 'away'; s.dispatchEvent(new Event('change')); return true })(document.getElementById('status'))`)
	b.waitUntil("alice away in bob's roster", jsRosterStatus("alice", "away"))

	a.eval(`((s) => { s.value = 'at lunch'; s.dispatchEvent(new Event('change')); return true })(document.getElementById('text'))`)
	b.waitUntil("alice's status text in bob's roster", `((r) => r && r.dataset.text === 'at lunch' && r.textContent.endsWith('away: at lunch'))([...document.querySelectorAll('#roster li')].find(li => li.dataset.user === 'alice'))`)

	a.cancel() // closes the tab
	b.waitUntil("alice offline in bob's roster", jsRosterStatus("alice", "offline"))
	// ... last seen when her session ended, as g1 tells it, with her text.
	var seen string
	jsWaitFor(t, "alice's last seen on g1", func() bool { seen = lastSeenOn(t, g1.GW, "alice"); return seen != "" })
	b.waitUntil("alice's last seen in bob's roster", fmt.Sprintf(`((r) => r && r.dataset.lastSeen === %q &&
		/— offline: at lunch \(last seen .+\)$/.test(r.textContent))([...document.querySelectorAll('#roster li')].find(li => li.dataset.user === 'alice'))`, seen))

	g1.Kill()
	b.waitUntil("bob reconnected to g0", jsConnectedTo("g0"))
	jsWaitFor(t, "bob online on g0, seen from g0", func() bool { return online(t, g0.GW, "bob", "g0") })
	b.waitUntil("bob still in his roster", jsRosterStatus("bob", "available"))
}

// lastSeenOn returns the last_seen gw shows for user ("" for none).
func lastSeenOn(t *testing.T, gw *node.Node, user string) string {
	t.Helper()
	resp, err := http.Get("http://" + gw.HTTPAddr().String() + "/v1/presence/" + user)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var p struct {
		LastSeen string `json:"last_seen"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
		t.Fatal(err)
	}
	return p.LastSeen
}
