// Package consolefiles tests the console's files, commands and terminal
// tabs in a real browser: Debian's headless Chromium, driven with
// chromedp, against a real `cove serve` with real sandboxes.
package consolefiles

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/browsertest"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
	cove "github.com/cove-dev/cove/sdk/go"
)

func TestMain(m *testing.M) { e2etest.Main(m) }

// browser is a signed-in page on a server.
type browser struct {
	*browsertest.Browser
	s *e2etest.Server
}

func poll(js string) chromedp.Action { return browsertest.Poll(js, 30*time.Second) }

func jsStr(s string) string { return fmt.Sprintf("%q", s) }

// TestConsoleTabs: the files tab edits, saves with the version (a change
// in between becomes a conflict dialog with a diff and a deliberate
// overwrite), uploads (picker and drop) and checks downloads against the
// server's sha-256; the commands tab lists commands with their exit codes
// and follows output live; the terminal reattaches to its shell after a
// reload.
func TestConsoleTabs(t *testing.T) {
	s := e2etest.StartServer(t, e2etest.WithManaged)
	bt := browsertest.New(t, s.URL, 4*time.Minute)

	name := fmt.Sprintf("consolefiles-%d", time.Now().UnixNano()%1000000)
	sb := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{Name: name})
	t.Cleanup(func() { s.Admin.TerminateSandbox(context.Background(), sb.ID) })

	bt.SignIn(s.URL, s.AdminKey, `tr[data-id="`+sb.ID+`"]`)

	t.Run("files", func(t *testing.T) { testFiles(t, &browser{bt.In(t), s}, sb) })
	t.Run("commands", func(t *testing.T) { testCommands(t, &browser{bt.In(t), s}, sb) })
	t.Run("terminal", func(t *testing.T) { testTerminal(t, &browser{bt.In(t), s}, sb) })
}

func readFile(t *testing.T, c *cove.Client, id, path string) []byte {
	t.Helper()
	r, err := c.ReadFile(context.Background(), id, path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	defer r.Close()
	data, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return data
}

func writeFile(t *testing.T, c *cove.Client, id, path, text string) {
	t.Helper()
	if _, err := c.WriteFile(context.Background(), id, path, strings.NewReader(text)); err != nil {
		t.Fatalf("write %s: %v", path, err)
	}
}

// editorJS is the editor's content element, inside its shadow root.
const editorJS = `document.querySelector('#file-editor').shadowRoot?.querySelector('.cm-content')`

// typeInEditor replaces the editor's text by typing, as a user does.
func typeInEditor(text string) chromedp.Action {
	return chromedp.Tasks{
		chromedp.Click(editorJS, chromedp.ByJSPath),
		chromedp.KeyEvent("a", chromedp.KeyModifiers(input.ModifierCtrl)),
		chromedp.KeyEvent(kb.Delete),
		chromedp.KeyEvent(text),
	}
}

func testFiles(t *testing.T, b *browser, sb api.Sandbox) {
	s := b.s
	wd := sb.Workdir
	if wd == "" {
		wd = "/home/user"
	}
	notes := wd + "/notes.txt"
	writeFile(t, s.Admin, sb.ID, notes, "first line\n")

	b.Run("open the file",
		chromedp.Navigate(s.URL+"/sandboxes/"+sb.ID+"/files"),
		chromedp.WaitVisible(`button[data-path=`+jsStr(notes)+`]`, chromedp.ByQuery),
		chromedp.Click(`button[data-path=`+jsStr(notes)+`]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#file-editor[data-version]`, chromedp.ByQuery),
		poll(editorJS+`?.textContent.includes('first line')`),
		poll(`document.getElementById('file-verified').dataset.verified === 'true'`),
	)

	// The tree refreshes on its own: a file made from inside the sandbox
	// shows without a reload, and one removed goes.
	appeared := wd + "/appeared-from-inside.txt"
	e2etest.MustOK(t, s.Admin, sb.ID, "echo hi > "+appeared)
	b.Run("the tree shows a new file on its own",
		poll(`document.querySelector('button[data-path=`+jsStr(appeared)+`]') !== null`),
	)
	e2etest.MustOK(t, s.Admin, sb.ID, "rm "+appeared)
	b.Run("the tree drops a removed file on its own",
		poll(`document.querySelector('button[data-path=`+jsStr(appeared)+`]') === null`),
	)

	b.Run("edit and save",
		typeInEditor("console edit one"),
		chromedp.Click("#file-save", chromedp.ByID),
		poll(`document.getElementById('file-status').textContent === 'saved'`),
	)
	if got := string(readFile(t, s.Admin, sb.ID, notes)); got != "console edit one" {
		t.Fatalf("after save the file holds %q", got)
	}

	// Someone else changes it; the console's next save is refused and the
	// conflict dialog offers the difference and a deliberate overwrite.
	writeFile(t, s.Admin, sb.ID, notes, "their change\n")
	var merged string
	b.Run("conflict",
		typeInEditor("console edit two"),
		chromedp.Click("#file-save", chromedp.ByID),
		chromedp.WaitVisible("#conflict[open]", chromedp.ByQuery),
		chromedp.Click("#conflict-diff", chromedp.ByID),
		poll(`(() => { const t = document.getElementById('conflict-merge').shadowRoot?.textContent ?? ''; return t.includes('their change') && t.includes('console edit two'); })()`),
		chromedp.Evaluate(`document.getElementById('conflict-merge').shadowRoot.textContent`, &merged),
		b.Shot("files-conflict-1280x800.png", 1280, 800),
	)
	if got := string(readFile(t, s.Admin, sb.ID, notes)); got != "their change\n" {
		t.Fatalf("the refused save changed the file: %q", got)
	}
	b.Run("overwrite on purpose",
		chromedp.Click("#conflict-overwrite", chromedp.ByID),
		poll(`!document.getElementById('conflict').open && document.getElementById('file-status').textContent === 'saved'`),
	)
	if got := string(readFile(t, s.Admin, sb.ID, notes)); got != "console edit two" {
		t.Fatalf("after the overwrite the file holds %q", got)
	}

	// Upload with the picker: random bytes land as they are.
	up := make([]byte, 300<<10)
	for i := range up {
		up[i] = byte(i*131 + i/977)
	}
	local := filepath.Join(t.TempDir(), "picked.bin")
	if err := os.WriteFile(local, up, 0o644); err != nil {
		t.Fatal(err)
	}
	b.Run("upload with the picker",
		chromedp.SetUploadFiles("#files-pick", []string{local}, chromedp.ByID),
		poll(`document.getElementById('files-upstatus').dataset.uploaded === `+jsStr(wd+"/picked.bin")),
	)
	if got := readFile(t, s.Admin, sb.ID, wd+"/picked.bin"); sha256.Sum256(got) != sha256.Sum256(up) {
		t.Fatalf("picked.bin landed with %d bytes and another sha-256", len(got))
	}

	// Upload by dropping a file built in the page.
	dropped := make([]byte, 200000)
	for i := range dropped {
		dropped[i] = byte((i * 7) % 251)
	}
	b.Run("upload by drop",
		chromedp.Evaluate(`(() => {
			const a = new Uint8Array(200000); for (let i = 0; i < a.length; i++) a[i] = (i * 7) % 251;
			const dt = new DataTransfer(); dt.items.add(new File([a], 'dropped.bin'));
			const el = document.getElementById('files');
			el.dispatchEvent(new DragEvent('dragover', {dataTransfer: dt, bubbles: true, cancelable: true}));
			el.dispatchEvent(new DragEvent('drop', {dataTransfer: dt, bubbles: true, cancelable: true}));
		})()`, nil),
		poll(`document.getElementById('files-upstatus').dataset.uploaded === `+jsStr(wd+"/dropped.bin")),
	)
	if got := readFile(t, s.Admin, sb.ID, wd+"/dropped.bin"); sha256.Sum256(got) != sha256.Sum256(dropped) {
		t.Fatalf("dropped.bin landed with %d bytes and another sha-256", len(got))
	}

	// A binary file is not opened in the editor; its download is checked.
	sum := sha256.Sum256(up)
	var verifiedSum string
	b.Run("download",
		chromedp.WaitVisible(`button[data-path=`+jsStr(wd+"/picked.bin")+`]`, chromedp.ByQuery),
		chromedp.Click(`button[data-path=`+jsStr(wd+"/picked.bin")+`]`, chromedp.ByQuery),
		poll(`document.getElementById('file-note').textContent.includes('binary')`),
		chromedp.Evaluate(`document.getElementById('file-verified').removeAttribute('data-verified')`, nil),
		chromedp.Click("#file-download", chromedp.ByID),
		poll(`document.getElementById('file-verified').dataset.verified === 'true'`),
		chromedp.AttributeValue("#file-verified", "data-sha256", &verifiedSum, nil, chromedp.ByID),
	)
	if verifiedSum != hex.EncodeToString(sum[:]) {
		t.Fatalf("verified sha-256 %s, want %s", verifiedSum, hex.EncodeToString(sum[:]))
	}
	if document := b.text("#file-verified"); document != "verified sha-256" {
		t.Fatalf("the page says %q", document)
	}

	// The same download with a digest changed on the way is not verified.
	other := sha256.Sum256([]byte("something else"))
	tampered := "sha-256=:" + base64.StdEncoding.EncodeToString(other[:]) + ":"
	chromedp.ListenTarget(b.Ctx, func(ev any) {
		e, ok := ev.(*fetch.EventRequestPaused)
		if !ok {
			return
		}
		t.Logf("paused %s at %d", e.Request.URL, e.ResponseStatusCode)
		go func() {
			var hs []*fetch.HeaderEntry
			for _, h := range e.ResponseHeaders {
				if !strings.EqualFold(h.Name, "Repr-Digest") {
					hs = append(hs, h)
				}
			}
			hs = append(hs, &fetch.HeaderEntry{Name: "Repr-Digest", Value: tampered})
			if err := chromedp.Run(b.Ctx, fetch.ContinueResponse(e.RequestID).WithResponseCode(e.ResponseStatusCode).WithResponseHeaders(hs)); err != nil {
				t.Logf("continue %s: %v", e.Request.URL, err)
			}
		}()
	})
	b.Run("tampered download",
		fetch.Enable().WithPatterns([]*fetch.RequestPattern{{URLPattern: "*/files/content?*", RequestStage: fetch.RequestStageResponse}}),
		chromedp.Click("#file-download", chromedp.ByID),
		poll(`document.getElementById('file-verified').dataset.verified === 'false'`),
		fetch.Disable(),
	)
	if got := b.text("#file-verified"); strings.Contains(got, "verified sha-256") && !strings.Contains(got, "NOT") {
		t.Fatalf("a tampered download shows %q", got)
	}

	// Hostile: a name and contents written in the sandbox that are markup
	// stay text.
	hostile := wd + `/<img src=x onerror="window.pwned=1">.txt`
	writeFile(t, s.Admin, sb.ID, hostile, `<script>window.pwned=2</script><img src=x onerror="window.pwned=3">`+"\n")
	var clean bool
	b.Run("hostile name and contents",
		chromedp.Navigate(s.URL+"/sandboxes/"+sb.ID+"/files"),
		chromedp.WaitVisible(`button[data-path=`+jsStr(hostile)+`]`, chromedp.ByQuery),
		chromedp.Click(`button[data-path=`+jsStr(hostile)+`]`, chromedp.ByQuery),
		poll(editorJS+`?.textContent.includes('<script>window.pwned=2</script>')`),
		chromedp.Evaluate(`window.pwned === undefined && !document.querySelector('#files img, #files script') && !document.querySelector('#file-editor').shadowRoot.querySelector('img, script')`, &clean),
	)
	if !clean {
		t.Fatalf("markup from the sandbox became elements")
	}

	// Keyboard: Tab from the tab bar reaches the tree, the save button
	// and the editor.
	b.Run("open the text file again",
		chromedp.Click(`button[data-path=`+jsStr(notes)+`]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#file-editor[data-version]`, chromedp.ByQuery),
		chromedp.Focus("#tab-files", chromedp.ByID),
	)
	seen := map[string]bool{}
	for i := 0; i < 80 && !(seen["tree"] && seen["save"] && seen["editor"]); i++ {
		var what string
		b.Run("tab", chromedp.KeyEvent(kb.Tab), chromedp.Evaluate(`(() => {
			const a = document.activeElement;
			if (!a) return '';
			if (a.classList.contains('fnode')) return 'tree';
			if (a.id === 'file-save') return 'save';
			if (a.id === 'file-editor' && a.shadowRoot.activeElement?.classList.contains('cm-content')) return 'editor';
			return a.id || a.tagName;
		})()`, &what))
		seen[what] = true
	}
	if !(seen["tree"] && seen["save"] && seen["editor"]) {
		t.Fatalf("Tab reached %v, not the tree, the save button and the editor", seen)
	}

	b.Run("screenshots",
		b.Shot("files-1280x800.png", 1280, 800),
		b.Shot("files-390x844.png", 390, 844),
	)
	// Narrow: the tree, the editor and the save button are all on the page.
	var fits bool
	b.Run("narrow", chromedp.EmulateViewport(390, 844), chromedp.Sleep(300*time.Millisecond), chromedp.Evaluate(`(() => {
		const w = document.documentElement.clientWidth;
		return ['files-tree', 'file-save', 'file-editor'].every(id => { const r = document.getElementById(id).getBoundingClientRect(); return r.width > 0 && r.right <= w + 1; });
	})()`, &fits), chromedp.EmulateViewport(1280, 800))
	if !fits {
		t.Fatalf("at 390px wide the files tab does not fit")
	}
}

func (b *browser) text(sel string) string {
	var s string
	b.Run("read "+sel, chromedp.Text(sel, &s, chromedp.ByQuery))
	return s
}

func testCommands(t *testing.T, b *browser, sb api.Sandbox) {
	s := b.s
	res := e2etest.Sh(t, s.Admin, sb.ID, `echo cmd-hello; echo '<img src=x onerror="window.pwned=4">'; echo cmd-err >&2; exit 3`)
	cid := res.Command.ID
	row := `tr[data-id="` + cid + `"]`
	var out string
	b.Run("the history",
		chromedp.Navigate(s.URL+"/sandboxes/"+sb.ID+"/commands"),
		chromedp.WaitVisible(row+`[data-exit="3"]`, chromedp.ByQuery),
		chromedp.Click(row+` button[data-open]`, chromedp.ByQuery),
		poll(`document.getElementById('cmd-output').dataset.state === 'ended'`),
		chromedp.Text("#cmd-output", &out, chromedp.ByID),
	)
	var clean bool
	b.Run("output stays text", chromedp.Evaluate(`window.pwned === undefined && !document.querySelector('#cmd-output img')`, &clean))
	if !clean || !strings.Contains(out, "<img src=x") {
		t.Fatalf("markup in the output became elements (or is missing): %q", out)
	}
	if !strings.Contains(out, "cmd-hello") || !strings.Contains(out, "cmd-err") {
		t.Fatalf("the command's output shows %q", out)
	}
	var state string
	b.Run("its end", chromedp.Text("#cmd-state", &state, chromedp.ByID))
	if state != "exited with 3" {
		t.Fatalf("the command's end shows %q", state)
	}

	// A running command: three lines, then it waits for a file; the page
	// shows the three while it runs, then the fourth after it goes on.
	gate := fmt.Sprintf("/tmp/go-on-%d", time.Now().UnixNano())
	cmd, err := s.Admin.Exec(context.Background(), sb.ID, api.CreateCommandRequest{
		Command: `for i in 1 2 3; do echo live-$i; done; while [ ! -e ` + gate + ` ]; do sleep 0.1; done; echo live-4`,
	})
	if err != nil {
		t.Fatal(err)
	}
	row = `tr[data-id="` + cmd.ID + `"]`
	b.Run("follow a running command",
		chromedp.WaitVisible(row+` button[data-open]`, chromedp.ByQuery),
		chromedp.Click(row+` button[data-open]`, chromedp.ByQuery),
		poll(`document.getElementById('cmd-output').dataset.command === `+jsStr(cmd.ID)+` && document.getElementById('cmd-output').textContent.includes('live-3')`),
		chromedp.Text("#cmd-output", &out, chromedp.ByID),
	)
	if strings.Contains(out, "live-4") {
		t.Fatalf("live-4 before the gate opened: %q", out)
	}
	if c, err := s.Admin.GetCommand(context.Background(), sb.ID, cmd.ID); err != nil || c.State != "running" {
		t.Fatalf("the command is %+v (%v), want running", c, err)
	}
	var live string
	b.Run("still following", chromedp.AttributeValue("#cmd-output", "data-state", &live, nil, chromedp.ByID),
		b.Shot("commands-1280x800.png", 1280, 800), b.Shot("commands-390x844.png", 390, 844))
	if live != "following" {
		t.Fatalf("the output's state is %q while the command runs", live)
	}
	e2etest.MustOK(t, s.Admin, sb.ID, "touch "+gate)
	b.Run("the rest",
		poll(`document.getElementById('cmd-output').textContent.includes('live-4') && document.getElementById('cmd-output').dataset.state === 'ended'`),
		chromedp.Text("#cmd-output", &out, chromedp.ByID),
		chromedp.WaitVisible(row+`[data-exit="0"]`, chromedp.ByQuery),
	)
	last := -1
	for i := 1; i <= 4; i++ {
		at := strings.Index(out, fmt.Sprintf("live-%d", i))
		if at <= last {
			t.Fatalf("live-%d out of order in %q", i, out)
		}
		last = at
	}
}

func testTerminal(t *testing.T, b *browser, sb api.Sandbox) {
	s := b.s
	marker := fmt.Sprintf("marker-%d", time.Now().UnixNano()%1000000)
	b.Run("a shell",
		chromedp.Navigate(s.URL+"/sandboxes/"+sb.ID),
		chromedp.WaitVisible(`#terminal[data-ready="1"]`, chromedp.ByQuery),
		poll(`(`+browsertest.BufferJS+`).trim().length > 0`),
		chromedp.Sleep(time.Second), // the prompt settles
		chromedp.Focus(".xterm-helper-textarea", chromedp.ByQuery),
		input.InsertText("echo "+marker),
		chromedp.KeyEvent(kb.Enter),
		poll(`(`+browsertest.BufferJS+`).split(`+jsStr(marker)+`).length >= 3`),
	)
	var screen string
	b.Run("reload",
		chromedp.Reload(),
		chromedp.WaitVisible(`#terminal[data-ready="1"]`, chromedp.ByQuery),
		poll(`(`+browsertest.BufferJS+`).includes(`+jsStr(marker)+`)`),
		chromedp.Evaluate(browsertest.BufferJS, &screen),
	)
	cmds, err := s.Admin.ListCommands(context.Background(), sb.ID, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	shells := 0
	for _, c := range cmds.Items {
		if c.Command == "bash -l" {
			shells++
		}
	}
	if shells != 1 {
		t.Fatalf("%d bash -l commands after the reload, want 1: %+v", shells, cmds.Items)
	}
	if !bytes.Contains([]byte(screen), []byte(marker)) {
		t.Fatalf("the screen after the reload:\n%s", screen)
	}

	// The PTY follows the window: narrower, and `stty size` in the shell
	// says what the page last sent.
	var wide, narrow string
	b.Run("the size", chromedp.AttributeValue("#terminal", "data-size", &wide, nil, chromedp.ByID))
	if wide == "" {
		t.Fatalf("the terminal sent no size")
	}
	b.Run("resize",
		chromedp.EmulateViewport(700, 800),
		poll(`document.getElementById('terminal').dataset.size !== `+jsStr(wide)),
	)
	// The shell's view of its size is what the page sent last (asked again
	// should a later layout change have sent another).
	after := func(try int) string {
		return `(() => { const ls = (` + browsertest.BufferJS + `).split('\n'); const i = ls.findIndex(l => l.includes('stty size # ` + fmt.Sprint(try) + `')); return i < 0 ? [] : ls.slice(i + 1); })()`
	}
	matched := false
	for try := 0; try < 3 && !matched; try++ {
		b.Run("stty size",
			chromedp.Focus(".xterm-helper-textarea", chromedp.ByQuery),
			input.InsertText(fmt.Sprintf("stty size # %d", try)),
			chromedp.KeyEvent(kb.Enter),
			poll(after(try)+`.some(l => /^\d+ \d+$/.test(l.trim()))`),
			chromedp.AttributeValue("#terminal", "data-size", &narrow, nil, chromedp.ByID),
			chromedp.Evaluate(after(try)+`.some(l => l.trim() === document.getElementById('terminal').dataset.size)`, &matched),
		)
	}
	if !matched || narrow == wide {
		t.Fatalf("the shell's size is not the page's %q (was %q)", narrow, wide)
	}
	b.Run("shot", b.Shot("terminal-reattached-1280x800.png", 1280, 800))
	t.Logf("terminal size %q → %q", wide, narrow)
}
