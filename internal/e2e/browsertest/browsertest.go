// Package browsertest drives the web console in Debian's headless
// Chromium with chromedp, for the console's browser tests: one browser per
// test, screenshots kept, and steps that fail with the page's text.
package browsertest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// BufferJS reads the terminal's screen as text, row by row.
const BufferJS = `(() => { const r = document.querySelector('.xterm-rows'); return r ? Array.from(r.children).map(c => c.textContent.replace(/\u00a0/g, ' ').trimEnd()).join('\n') : ''; })()`

// Chromium is Debian's browser, or "" where it is not installed.
func Chromium() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// Browser is a tab of a headless Chromium.
type Browser struct {
	T   testing.TB
	Ctx context.Context
	// Shots is where screenshots go: $COVE_CONSOLE_SHOTS, or a new
	// temporary folder that the run keeps.
	Shots string
}

// New starts a browser for the console of the server at url, stopped when
// the test ends (or after timeout). It skips the test where Chromium is
// not installed or the server's binary was built without the console.
func New(t *testing.T, url string, timeout time.Duration) *Browser {
	t.Helper()
	if Chromium() == "" {
		t.Skip("chromium is not installed (make test-deps installs Debian's chromium): the console's browser test cannot run")
	}
	resp, err := http.Get(url + "/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.Contains(string(page), "console is not built") {
		t.Skip("this cove binary was built without the console (make build builds it)")
	}
	return Start(t, timeout)
}

// Start starts a browser whatever the server serves at its root (for
// tests of what a page may do, not of the console), stopped when the
// test ends (or after timeout), with Chromium's options beside the
// usual ones. It skips the test where Chromium is not installed.
func Start(t *testing.T, timeout time.Duration, extra ...chromedp.ExecAllocatorOption) *Browser {
	t.Helper()
	exe := Chromium()
	if exe == "" {
		t.Skip("chromium is not installed (make test-deps installs Debian's chromium): the browser test cannot run")
	}
	shots := os.Getenv("COVE_CONSOLE_SHOTS")
	var err error
	if shots == "" {
		if shots, err = os.MkdirTemp("", "cove-console-shots-"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if !t.Failed() {
				os.RemoveAll(shots)
			}
		})
		t.Logf("screenshots in %s (kept if the test fails)", shots)
	} else if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	} else {
		t.Logf("screenshots in %s", shots)
	}
	// Chromium's profile and its own temporary files go to a folder of the
	// test's, removed once the browser has stopped (cleanups run last
	// first).
	tmp, err := os.MkdirTemp("", "cove-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeProfile(tmp) })
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe),
		chromedp.NoSandbox, // as root
		chromedp.WindowSize(1280, 800),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(filepath.Join(tmp, "profile")),
		chromedp.Env("TMPDIR="+tmp),
	)
	opts = append(opts, extra...)
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelA)
	ctx, cancelC := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	t.Cleanup(cancelC)
	ctx, cancelT := context.WithTimeout(ctx, timeout)
	t.Cleanup(cancelT)
	// Start the browser on this context: the first Run's context owns it.
	if err := chromedp.Run(ctx); err != nil {
		t.Fatal(err)
	}
	return &Browser{T: t, Ctx: ctx, Shots: shots}
}

// Tab opens another tab of the same browser (its own session storage, so
// it can sign in with another key), closed when the test ends.
func (b *Browser) Tab(t testing.TB) *Browser {
	t.Helper()
	ctx, cancel := chromedp.NewContext(b.Ctx)
	t.Cleanup(cancel)
	if err := chromedp.Run(ctx); err != nil {
		t.Fatal(err)
	}
	return &Browser{T: t, Ctx: ctx, Shots: b.Shots}
}

// In is the browser with failures reported to t (a subtest).
func (b *Browser) In(t testing.TB) *Browser {
	return &Browser{T: t, Ctx: b.Ctx, Shots: b.Shots}
}

// Run runs the steps; a failure ends the test with the page's text. A
// page load that Chromium cut because the host's network changed (other
// tests add and remove sandboxes' interfaces all the time, and Chromium
// watches every address of the host) is run again, twice at most.
func (b *Browser) Run(what string, actions ...chromedp.Action) {
	b.T.Helper()
	ctx, cancel := context.WithTimeout(b.Ctx, 3*time.Minute)
	defer cancel()
	err := chromedp.Run(ctx, actions...)
	for try := 0; try < 2 && err != nil && strings.Contains(err.Error(), "ERR_NETWORK_CHANGED"); try++ {
		b.T.Logf("%s: %v; again", what, err)
		err = chromedp.Run(ctx, actions...)
	}
	if err != nil {
		var text string
		chromedp.Run(b.Ctx, chromedp.Evaluate(`document.body.innerText`, &text))
		b.T.Fatalf("%s: %v\npage:\n%s", what, err, text)
	}
}

// SignIn signs in on the server at url with key and waits for sel.
func (b *Browser) SignIn(url, key, sel string) {
	b.T.Helper()
	b.Run("sign in",
		chromedp.EmulateViewport(1280, 800),
		chromedp.Navigate(url+"/"),
		chromedp.WaitVisible("#key", chromedp.ByID),
		chromedp.SendKeys("#key", key, chromedp.ByID),
		chromedp.Click(`#signin button[type="submit"]`, chromedp.ByQuery),
		chromedp.WaitVisible(sel, chromedp.ByQuery),
	)
}

// Shot saves a screenshot at w×h as file, then goes back to 1280×800.
func (b *Browser) Shot(file string, w, h int64) chromedp.Action {
	var buf []byte
	return chromedp.Tasks{
		chromedp.EmulateViewport(w, h),
		chromedp.Sleep(400 * time.Millisecond), // layout and charts settle
		chromedp.CaptureScreenshot(&buf),
		chromedp.ActionFunc(func(context.Context) error {
			return os.WriteFile(filepath.Join(b.Shots, file), buf, 0o644)
		}),
		chromedp.EmulateViewport(1280, 800),
	}
}

// Shots2 saves name-1280x800.png and name-390x844.png.
func (b *Browser) Shots2(name string) chromedp.Action {
	return chromedp.Tasks{
		b.Shot(fmt.Sprintf("%s-1280x800.png", name), 1280, 800),
		b.Shot(fmt.Sprintf("%s-390x844.png", name), 390, 844),
	}
}

// Poll waits until js is true, for at most d.
func Poll(js string, d time.Duration) chromedp.Action {
	return chromedp.Poll(js, nil, chromedp.WithPollingTimeout(d))
}

// removeProfile removes Chromium's folder once no process of the browser
// (its helpers outlive the main process by a moment, and write on their
// way out) names it any more, waiting at most 10 seconds.
func removeProfile(dir string) {
	for range 100 {
		if !inUse(dir) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	os.RemoveAll(dir)
}

// inUse reports whether a process's command line names dir.
func inUse(dir string) bool {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), dir) {
			return true
		}
	}
	return false
}
