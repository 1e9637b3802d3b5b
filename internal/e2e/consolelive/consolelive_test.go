// Package consolelive tests the console's live views in a real browser
// (Debian's headless Chromium driven with chromedp) against a real `cove
// serve` with real sandboxes: metrics charts drawn from the samples the
// API answers, a denied destination allowed from the network tab, the
// header's sleep and wake transitions, the usage views, New → Run code
// refused with its reason for a team without the managed environment,
// and the size of the first load.
package consolelive

import (
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/browsertest"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
	cove "github.com/cove-dev/cove/sdk/go"
)

func TestMain(m *testing.M) { e2etest.Main(m) }

// budget is the most the first load (page, script, styles: compressed
// bodies and headers) may transfer.
const budget = 500 * 1024

// firstLoadJS sums what the first load transferred: the page and every
// resource, headers and compressed bodies.
const firstLoadJS = `(() => {
	const nav = performance.getEntriesByType('navigation')[0];
	const res = performance.getEntriesByType('resource');
	let bytes = nav.transferSize, body = nav.encodedBodySize, decoded = nav.decodedBodySize;
	for (const r of res) { bytes += r.transferSize; body += r.encodedBodySize; decoded += r.decodedBodySize; }
	return {requests: res.length + 1, transferred: bytes, encoded_bodies: body, decoded_bodies: decoded};
})()`

// seriesPixelsJS counts the pixels of the CPU chart's canvas drawn in the
// CPU series' colour (#4f8cff): the line uPlot drew from the samples.
const seriesPixelsJS = `(() => {
	const c = document.querySelector('#chart-cpu canvas');
	if (!c || !c.width) return 0;
	const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
	let n = 0;
	for (let i = 0; i < d.length; i += 4)
		if (Math.abs(d[i] - 79) < 40 && Math.abs(d[i+1] - 140) < 40 && d[i+2] > 200 && d[i+3] > 150) n++;
	return n;
})()`

// recordStateJS records every text #sb-state shows, in order.
const recordStateJS = `(() => {
	window.seenStates = [document.getElementById('sb-state').textContent];
	new MutationObserver(() => {
		const t = document.getElementById('sb-state').textContent;
		if (window.seenStates[window.seenStates.length - 1] !== t) window.seenStates.push(t);
	}).observe(document.getElementById('sb-state'), {childList: true, characterData: true, subtree: true});
	return true;
})()`

// TestConsoleLive drives the live views on one server and one sandbox.
func TestConsoleLive(t *testing.T) {
	if e2etest.ManagedDir() == "" {
		t.Skip("COVE_TEST_IMAGES is not set: this test loads a sandbox with the managed image's tools")
	}
	host := e2etest.StartTestHost(t)
	s := e2etest.StartServer(t, e2etest.WithManaged, e2etest.WithArgs("--warm-pool", "0", "--metrics-interval", "1s"))
	checkCompressed(t, s.URL)

	name := fmt.Sprintf("live-%d", time.Now().UnixNano()%100000)
	sb := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{Name: name, Network: &api.NetworkPolicy{Allow: []string{"web.test:80"}}})
	denied := fmt.Sprintf("%s:8080", host.Addr)
	// Some CPU load to chart, and a connection the policy denies (to the
	// test host's namespace: nothing leaves the machine).
	e2etest.Sh(t, s.Admin, sb.ID, "timeout 4 sh -c 'while :; do :; done'; true", e2etest.WithTimeout(30))
	e2etest.Sh(t, s.Admin, sb.ID, "curl -s --max-time 5 http://"+denied+"/; true", e2etest.WithTimeout(30))

	b := browsertest.New(t, s.URL, 10*time.Minute)
	var firstLoad map[string]any
	b.Run("sign in",
		chromedp.EmulateViewport(1280, 800),
		chromedp.Navigate(s.URL+"/"),
		chromedp.WaitVisible("#key", chromedp.ByID),
		chromedp.Evaluate(firstLoadJS, &firstLoad),
		chromedp.SendKeys("#key", s.AdminKey, chromedp.ByID),
		chromedp.Click(`#signin button[type="submit"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`tr[data-id="`+sb.ID+`"]`, chromedp.ByQuery),
		browsertest.Poll(`document.getElementById('new').dataset.ready === '1'`, 30*time.Second),
		b.Shots2("list"),
	)
	transferred, _ := firstLoad["transferred"].(float64)
	t.Logf("first load: %v (budget %d bytes)", firstLoad, budget)
	if transferred <= 0 || transferred > budget {
		t.Fatalf("first load transferred %.0f bytes, budget %d", transferred, budget)
	}

	t.Run("metrics", func(t *testing.T) {
		b := b.In(t)
		var pixels int
		b.Run("metrics tab",
			chromedp.Navigate(s.URL+"/sandboxes/"+sb.ID+"/metrics"),
			browsertest.Poll(`Number(document.getElementById('metrics')?.dataset.samples) > 3`, 60*time.Second),
			browsertest.Poll(`(`+seriesPixelsJS+`) > 20`, 30*time.Second),
			chromedp.Evaluate(seriesPixelsJS, &pixels),
			b.Shots2("metrics"),
		)
		t.Logf("CPU series pixels: %d", pixels)
		// What the page loaded is what the API answers for the same range.
		// The page reads again every few seconds: a sample may land in its
		// range after its read, so compare on one of a few reads.
		var last string
		for range 3 {
			var attrs map[string]string
			b.Run("read the chart's data", chromedp.Evaluate(`Object.assign({}, document.getElementById('metrics').dataset)`, &attrs))
			from, err1 := time.Parse(time.RFC3339Nano, attrs["from"])
			to, err2 := time.Parse(time.RFC3339Nano, attrs["to"])
			if err1 != nil || err2 != nil {
				t.Fatalf("chart range %q–%q", attrs["from"], attrs["to"])
			}
			m, err := s.Admin.Metrics(t.Context(), sb.ID, cove.MetricsQuery{From: from, To: to})
			if err != nil {
				t.Fatal(err)
			}
			n, _ := strconv.Atoi(attrs["samples"])
			last = fmt.Sprintf("page: %d samples %s…%s; API: %d samples", n, attrs["first"], attrs["last"], len(m.Samples))
			if n == len(m.Samples) && n > 0 && same(attrs["first"], m.Samples[0].Time) && same(attrs["last"], m.Samples[n-1].Time) {
				t.Log(last)
				return
			}
			time.Sleep(time.Second)
		}
		t.Fatalf("the page's samples differ from the API's: %s", last)
	})

	t.Run("network", func(t *testing.T) {
		b := b.In(t)
		row := `tr[data-dest="` + denied + `"][data-decision="denied"]`
		var result string
		b.Run("network tab",
			chromedp.Click("#tab-network", chromedp.ByID),
			chromedp.WaitVisible(row, chromedp.ByQuery),
			b.Shots2("network"),
			chromedp.Click(row+` button.allow`, chromedp.ByQuery),
			browsertest.Poll(`document.getElementById('net-result').textContent.startsWith('Allowed')`, 30*time.Second),
			chromedp.Text("#net-result", &result, chromedp.ByID),
		)
		t.Logf("result: %s", result)
		got, err := s.Admin.GetSandbox(t.Context(), sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(got.Network.Allow, denied) || !slices.Contains(got.Network.Allow, "web.test:80") {
			t.Fatalf("policy after allow: %+v, want web.test:80 and %s", got.Network, denied)
		}
	})

	t.Run("events", func(t *testing.T) {
		b := b.In(t)
		b.Run("events tab",
			chromedp.Click("#tab-events", chromedp.ByID),
			chromedp.WaitVisible(`li.event[data-type="network.denied"]`, chromedp.ByQuery),
			b.Shots2("events"),
		)
	})

	t.Run("usage", func(t *testing.T) {
		b := b.In(t)
		var cost string
		b.Run("usage tab",
			chromedp.Click("#tab-usage", chromedp.ByID),
			chromedp.WaitVisible("#sb-usage-row", chromedp.ByID),
			chromedp.Text(`#sb-usage-row td[data-label="Cost"]`, &cost, chromedp.ByQuery),
			b.Shots2("usage"),
			chromedp.Click("#usage-link", chromedp.ByID),
			chromedp.WaitVisible(`#usage-rows tr[data-id="`+sb.ID+`"]`, chromedp.ByQuery),
			chromedp.WaitVisible("#usage-total", chromedp.ByID),
			b.Shots2("team-usage"),
		)
		if !strings.HasPrefix(cost, "$") {
			t.Fatalf("usage tab's cost %q", cost)
		}
	})

	t.Run("sleep and wake", func(t *testing.T) {
		b := b.In(t)
		var seen []string
		b.Run("header",
			chromedp.Navigate(s.URL+"/sandboxes/"+sb.ID+"/usage"),
			browsertest.Poll(`document.getElementById('sb-state').textContent === 'running'`, 30*time.Second),
			b.Shots2("header"),
			chromedp.Evaluate(recordStateJS, nil),
			chromedp.Click("#sleep", chromedp.ByID),
			browsertest.Poll(`document.getElementById('sb-state').textContent === 'asleep'`, 2*time.Minute),
			chromedp.WaitEnabled("#wake", chromedp.ByID),
			chromedp.Click("#wake", chromedp.ByID),
			browsertest.Poll(`window.seenStates.includes('waking…') && document.getElementById('sb-state').textContent === 'running'`, 2*time.Minute),
			chromedp.Evaluate(`window.seenStates`, &seen),
		)
		t.Logf("states shown: %q", seen)
		want := []string{"running", "sleeping…", "asleep", "waking…", "running"}
		i := 0
		for _, s := range seen {
			if i < len(want) && s == want[i] {
				i++
			}
		}
		if i != len(want) {
			t.Fatalf("states shown %q, want %q in this order", seen, want)
		}
	})

	t.Run("new without admission", func(t *testing.T) {
		b := b.In(t)
		team := fmt.Sprintf("noadm-%d", time.Now().UnixNano()%100000)
		resp, err := s.Admin.CreateTeam(t.Context(), team)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Admin.SetAdmission(t.Context(), resp.Team.ID, api.Admission{}); err != nil {
			t.Fatal(err)
		}
		var reason string
		var disabled bool
		// A tab of its own: its own session storage, so its own key.
		nb := b.Tab(t)
		nb.Run("sign in as the team",
			chromedp.EmulateViewport(1280, 800),
			chromedp.Navigate(s.URL+"/"),
			chromedp.WaitVisible("#key", chromedp.ByID),
			chromedp.SendKeys("#key", resp.APIKey, chromedp.ByID),
			chromedp.Click(`#signin button[type="submit"]`, chromedp.ByQuery),
			chromedp.WaitVisible("#new", chromedp.ByID),
			browsertest.Poll(`document.getElementById('new-reason').textContent.length > 0`, 30*time.Second),
			chromedp.Text("#new-reason", &reason, chromedp.ByID),
			chromedp.Evaluate(`document.getElementById('new').disabled`, &disabled),
			nb.Shots2("new-refused"),
		)
		t.Logf("reason: %s", reason)
		if !disabled || !strings.Contains(reason, "cove teams admit "+team+" --managed-environment") {
			t.Fatalf("New disabled %v, reason %q", disabled, reason)
		}
		c := cove.New(s.URL, resp.APIKey)
		l, err := c.ListSandboxes(t.Context(), cove.SandboxQuery{})
		if err != nil || len(l.Items) != 0 {
			t.Fatalf("the team's sandboxes: %v %v", l.Items, err)
		}
	})

	t.Run("terminate asks", func(t *testing.T) {
		b := b.In(t)
		var open, openAfter bool
		b.Run("dialog",
			chromedp.Navigate(s.URL+"/sandboxes/"+sb.ID+"/usage"),
			browsertest.Poll(`document.getElementById('sb-state').textContent === 'running'`, 30*time.Second),
			chromedp.Click("#terminate", chromedp.ByID),
			chromedp.WaitVisible("#terminate-dialog", chromedp.ByID),
			chromedp.Evaluate(`document.getElementById('terminate-dialog').open && document.activeElement.id === 'terminate-no'`, &open),
			chromedp.KeyEvent("\r"), // Enter on the focused Cancel
			chromedp.WaitNotVisible("#terminate-dialog", chromedp.ByID),
			chromedp.Evaluate(`document.getElementById('terminate-dialog').open`, &openAfter),
		)
		if !open || openAfter {
			t.Fatalf("dialog open with Cancel focused: %v, open after Cancel: %v", open, openAfter)
		}
		got, err := s.Admin.GetSandbox(t.Context(), sb.ID)
		if err != nil || got.State != api.StateRunning {
			t.Fatalf("after Cancel: %v %v", got.State, err)
		}
	})
}

// same says whether a timestamp the page kept is the API's time.
func same(page string, api time.Time) bool {
	p, err := time.Parse(time.RFC3339Nano, page)
	return err == nil && p.Equal(api)
}

var assetRE = regexp.MustCompile(`(?:href|src)="(/app\.[0-9a-f]+\.(?:js|css))"`)

// checkCompressed: the page names its script and styles, and both come
// gzip-compressed to a client that accepts it.
func checkCompressed(t *testing.T, base string) {
	t.Helper()
	resp, err := http.Get(base + "/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.Contains(string(page), "console is not built") {
		t.Skip("this cove binary was built without the console (make build builds it)")
	}
	m := assetRE.FindAllStringSubmatch(string(page), -1)
	if len(m) != 2 {
		t.Fatalf("assets named by the page: %v\n%s", m, page)
	}
	tr := &http.Transport{DisableCompression: true}
	for _, a := range m {
		req, _ := http.NewRequest("GET", base+a[1], nil)
		req.Header.Set("Accept-Encoding", "gzip, deflate, br")
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		zr, err := gzip.NewReader(resp.Body)
		if err != nil || resp.Header.Get("Content-Encoding") != "gzip" {
			t.Fatalf("%s: Content-Encoding %q, %v", a[1], resp.Header.Get("Content-Encoding"), err)
		}
		n, err := io.Copy(io.Discard, zr)
		resp.Body.Close()
		if err != nil || n == 0 {
			t.Fatalf("%s: gunzip %d bytes, %v", a[1], n, err)
		}
	}
}
