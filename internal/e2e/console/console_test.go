// Package console tests the web console in a real browser: Debian's
// headless Chromium, driven with chromedp, against a real `cove serve`.
package console

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/console"
	"github.com/cove-dev/cove/internal/e2e/browsertest"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
)

func TestMain(m *testing.M) { e2etest.Main(m) }

// firstLoadJS sums what the first load transferred: the page and every
// resource, headers and compressed bodies.
const firstLoadJS = `(() => {
	const nav = performance.getEntriesByType('navigation')[0];
	const res = performance.getEntriesByType('resource');
	let bytes = nav.transferSize, body = nav.encodedBodySize, decoded = nav.decodedBodySize;
	for (const r of res) { bytes += r.transferSize; body += r.encodedBodySize; decoded += r.decodedBodySize; }
	return {requests: res.length + 1, transferred: bytes, encoded_bodies: body, decoded_bodies: decoded};
})()`

// TestConsole: sign in with the admin key, the list shows a sandbox and
// the search box opens it by name; New → Run code lands on a terminal,
// where an example chip types its text at the prompt without running it
// and Enter runs it.
func TestConsole(t *testing.T) {
	s := e2etest.StartServer(t, e2etest.WithManaged)

	// The page itself: the index with a strict CSP, or the binary was built
	// without the console.
	resp, err := http.Get(s.URL + "/sandboxes/anything")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if got := resp.Header.Get("Content-Security-Policy"); got != console.CSP {
		t.Fatalf("deep link's CSP %q", got)
	}
	if strings.Contains(string(page), "console is not built") {
		t.Skip("this cove binary was built without the console (make build builds it)")
	}

	name := fmt.Sprintf("console-e2e-%d", time.Now().UnixNano()%100000)
	sb := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{Name: name})

	b := browsertest.New(t, s.URL, 2*time.Minute)
	ctx, run, shot := b.Ctx, b.Run, b.Shot

	var firstLoad map[string]any
	run("sign in",
		chromedp.EmulateViewport(1280, 800),
		chromedp.Navigate(s.URL+"/"),
		chromedp.WaitVisible("#key", chromedp.ByID),
		chromedp.Evaluate(firstLoadJS, &firstLoad),
		shot("signin-1280x800.png", 1280, 800),
		chromedp.SendKeys("#key", s.AdminKey, chromedp.ByID),
		chromedp.Click(`#signin button[type="submit"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`tr[data-id="`+sb.ID+`"]`, chromedp.ByQuery),
	)
	t.Logf("first load: %v", firstLoad)
	var team string
	var stored, href string
	run("the list", chromedp.Text("#team", &team, chromedp.ByID),
		chromedp.Evaluate(`sessionStorage.getItem('cove.key')`, &stored),
		chromedp.Evaluate(`location.href`, &href),
		shot("list-1280x800.png", 1280, 800), shot("list-390x844.png", 390, 844), chromedp.EmulateViewport(1280, 800))
	if team == "" || stored != s.AdminKey || strings.Contains(href, s.AdminKey) {
		t.Fatalf("team %q, key in sessionStorage %v, url %s", team, stored == s.AdminKey, href)
	}

	var title, path string
	run("open by name",
		chromedp.SendKeys("#search", name+kb.Enter, chromedp.ByID),
		chromedp.WaitVisible("#sb-facts dd", chromedp.ByQuery),
		chromedp.Poll(`document.getElementById('sb-state').textContent === 'running'`, nil, chromedp.WithPollingTimeout(30*time.Second)),
		chromedp.Text("#sb-name", &title, chromedp.ByID),
		chromedp.Evaluate(`location.pathname`, &path),
	)
	if title != name || path != "/sandboxes/"+name {
		t.Fatalf("opened %q at %s, want %q", title, path, name)
	}

	var newPath string
	run("new, run code",
		chromedp.Navigate(s.URL+"/"),
		chromedp.WaitVisible("#new", chromedp.ByID),
		chromedp.Click("#new", chromedp.ByID),
		chromedp.WaitVisible(`#terminal[data-ready="1"]`, chromedp.ByQuery),
		chromedp.Evaluate(`location.pathname`, &newPath),
		chromedp.Poll(`(`+browsertest.BufferJS+`).trim().length > 0`, nil, chromedp.WithPollingTimeout(30*time.Second)),
	)
	id := strings.TrimPrefix(newPath, "/sandboxes/")
	if id == newPath || id == "" || id == sb.ID {
		t.Fatalf("New landed on %s", newPath)
	}
	t.Cleanup(func() { s.Admin.TerminateSandbox(context.Background(), id) })

	var screen string
	run("the chip types",
		chromedp.Sleep(time.Second), // the prompt settles
		chromedp.Click(`button[data-example="python3 --version"]`, chromedp.ByQuery),
		chromedp.Poll(`(`+browsertest.BufferJS+`).includes('python3 --version')`, nil, chromedp.WithPollingTimeout(15*time.Second)),
		chromedp.Sleep(1500*time.Millisecond),
		chromedp.Evaluate(browsertest.BufferJS, &screen),
		shot("terminal-1280x800.png", 1280, 800),
		shot("terminal-390x844.png", 390, 844),
		chromedp.EmulateViewport(1280, 800),
	)
	if strings.Contains(screen, "Python 3.") {
		t.Fatalf("the chip ran the command:\n%s", screen)
	}
	// Nothing but the shell ran: the sandbox has one command, bash -l.
	cmds, err := s.Admin.ListCommands(ctx, id, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(cmds.Items) != 1 || cmds.Items[0].Command != "bash -l" {
		t.Fatalf("commands in the sandbox: %+v", cmds.Items)
	}
	ps := e2etest.MustOK(t, s.Admin, id, "ps -eo args")
	if strings.Contains(ps, "python3") {
		t.Fatalf("python3 runs:\n%s", ps)
	}

	run("enter runs it",
		chromedp.Focus(".xterm-helper-textarea", chromedp.ByQuery),
		chromedp.KeyEvent(kb.Enter),
		chromedp.Poll(`(`+browsertest.BufferJS+`).includes('Python 3.')`, nil, chromedp.WithPollingTimeout(15*time.Second)),
		chromedp.Evaluate(browsertest.BufferJS, &screen),
		shot("terminal-ran-1280x800.png", 1280, 800),
	)
}
