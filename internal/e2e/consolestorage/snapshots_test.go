// Package consolestorage tests the console's storage views in a real
// browser (Debian's headless Chromium driven with chromedp) against a
// real `cove serve` with real sandboxes: the sandbox page's snapshots and
// forks, and the team page's volumes.
package consolestorage

import (
	"context"
	"errors"
	"fmt"
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

func poll(js string) chromedp.Action { return browsertest.Poll(js, 90*time.Second) }

// notFound says whether err is the API's 404.
func notFound(err error) bool {
	var ce *cove.Error
	return errors.As(err, &ce) && ce.Code == api.CodeNotFound
}

func jsStr(s string) string { return fmt.Sprintf("%q", s) }

// cleanJS is true while no markup the API echoed became an element.
const cleanJS = `window.pwned === undefined && !document.querySelector('main img, dialog img')`

// TestSnapshotsAndForks: on the sandbox page's Snapshots tab a snapshot
// is taken, the sandbox is restored to it (after a question, which
// Cancel leaves unanswered), the sandbox is forked into two named
// sandboxes listed with links to their pages, a snapshot that forks
// stand on is refused with the API's message naming them, and one that
// nothing stands on is deleted. An error message that echoes markup
// stays text.
func TestSnapshotsAndForks(t *testing.T) {
	s := e2etest.StartServer(t, e2etest.WithManaged)
	b := browsertest.New(t, s.URL, 8*time.Minute)
	ctx := context.Background()

	run := time.Now().UnixNano() % 100000
	name := fmt.Sprintf("snapui-%d", run)
	sb := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{Name: name})
	t.Cleanup(func() { s.Admin.TerminateSandbox(context.Background(), sb.ID) })
	e2etest.MustOK(t, s.Admin, sb.ID, "echo before > /workspace/marker")

	b.SignIn(s.URL, s.AdminKey, `tr[data-id="`+sb.ID+`"]`)
	b.Run("snapshots tab",
		chromedp.Navigate(s.URL+"/sandboxes/"+sb.ID+"/snapshots"),
		chromedp.WaitVisible("#snap-form", chromedp.ByID),
		poll(`document.getElementById('snap-rows').dataset.loaded === '0'`),
		poll(`!document.getElementById('snap-take').disabled`),
	)

	// Hostile: the API's message echoes the name it refused; it shows as
	// text.
	hostile := `<img src=x onerror="window.pwned=1">`
	var errText string
	var clean bool
	b.Run("a name with markup",
		chromedp.SendKeys("#snap-name", hostile, chromedp.ByID),
		chromedp.Click("#snap-take", chromedp.ByID),
		poll(`document.getElementById('snap-error').textContent.includes('is invalid')`),
		chromedp.Sleep(300*time.Millisecond), // an image would have loaded and failed by now
		chromedp.Text("#snap-error", &errText, chromedp.ByID),
		chromedp.Evaluate(cleanJS, &clean),
	)
	if !strings.Contains(errText, `<img src=x`) || !clean {
		t.Fatalf("error %q; markup stayed text: %v", errText, clean)
	}

	snapName := fmt.Sprintf("before-%d", run)
	row := `tr.snap[data-name="` + snapName + `"]`
	b.Run("take a snapshot",
		chromedp.Evaluate(`document.getElementById('snap-name').value = ''`, nil),
		chromedp.SendKeys("#snap-name", snapName, chromedp.ByID),
		chromedp.Click("#snap-take", chromedp.ByID),
		chromedp.WaitVisible(row, chromedp.ByQuery),
		poll(`document.getElementById('snap-result').textContent.startsWith('Took `+snapName+`')`),
		poll(`document.getElementById('snap-error').textContent === ''`),
		b.Shots2("snapshots"),
	)
	snap, err := s.Admin.GetSnapshot(ctx, snapName)
	if err != nil || snap.SandboxID != sb.ID {
		t.Fatalf("the snapshot the page took: %+v %v", snap, err)
	}
	var rowID string
	b.Run("its row", chromedp.AttributeValue(row, "data-id", &rowID, nil, chromedp.ByQuery))
	if rowID != snap.ID {
		t.Fatalf("row for %s has ID %q, the API %q", snapName, rowID, snap.ID)
	}

	// The files change and a command runs; Cancel leaves both as they are.
	e2etest.MustOK(t, s.Admin, sb.ID, "rm /workspace/marker; echo after > /workspace/other")
	long, err := s.Admin.Exec(ctx, sb.ID, api.CreateCommandRequest{Command: "sleep 600"})
	if err != nil {
		t.Fatal(err)
	}
	var focusedCancel bool
	b.Run("restore, cancelled",
		chromedp.Click(row+` button.restore`, chromedp.ByQuery),
		chromedp.WaitVisible("#restore-dialog", chromedp.ByID),
		chromedp.Evaluate(`document.activeElement.id === 'restore-dialog-no'`, &focusedCancel),
		chromedp.Text("#restore-dialog-text", &errText, chromedp.ByID),
		b.Shots2("restore-dialog"),
		chromedp.KeyEvent("\r"), // Enter on the focused Cancel
		chromedp.WaitNotPresent("#restore-dialog", chromedp.ByID),
	)
	if !focusedCancel || !strings.Contains(errText, "running commands end") || !strings.Contains(errText, snapName) {
		t.Fatalf("restore dialog: Cancel focused %v, text %q", focusedCancel, errText)
	}
	if got := e2etest.MustOK(t, s.Admin, sb.ID, "cat /workspace/other; ls /workspace"); strings.Contains(got, "marker") {
		t.Fatalf("Cancel restored: %q", got)
	}
	if c, err := s.Admin.GetCommand(ctx, sb.ID, long.ID); err != nil || c.State != api.CommandRunning {
		t.Fatalf("after Cancel the command is %v %v", c.State, err)
	}

	b.Run("restore",
		chromedp.Click(row+` button.restore`, chromedp.ByQuery),
		chromedp.WaitVisible("#restore-dialog-yes", chromedp.ByID),
		chromedp.Click("#restore-dialog-yes", chromedp.ByID),
		poll(`document.getElementById('snap-result').textContent === 'Restored to `+snapName+`.'`),
		poll(`document.getElementById('sb-state').textContent === 'running'`),
	)
	if got := e2etest.MustOK(t, s.Admin, sb.ID, "cat /workspace/marker; ls /workspace"); !strings.Contains(got, "before") || strings.Contains(got, "other") {
		t.Fatalf("after restore: %q", got)
	}
	if c, err := s.Admin.GetCommand(ctx, sb.ID, long.ID); err != nil || c.State == api.CommandRunning {
		t.Fatalf("after restore the command is %v %v", c.State, err)
	}

	// Fork into two named sandboxes; the count follows the names.
	f1, f2 := fmt.Sprintf("fork-a-%d", run), fmt.Sprintf("fork-b-%d", run)
	var count string
	b.Run("fork",
		chromedp.SendKeys("#fork-names", f1+", "+f2, chromedp.ByID),
		chromedp.Value("#fork-count", &count, chromedp.ByID),
		chromedp.Click("#fork-go", chromedp.ByID),
		poll(`document.querySelectorAll('#fork-result li.fork').length === 2`),
		poll(`[...document.querySelectorAll('#fork-result li.fork .state')].every(e => e.textContent === 'running')`),
		b.Shots2("forks"),
	)
	if count != "2" {
		t.Fatalf("count after two names: %q", count)
	}
	var ids []string
	b.Run("the forks' IDs", chromedp.Evaluate(`[...document.querySelectorAll('#fork-result li.fork')].map(e => e.dataset.id)`, &ids))
	for i, want := range []string{f1, f2} {
		got, err := s.Admin.GetSandbox(ctx, ids[i])
		if err != nil || got.Name != want || got.State != api.StateRunning {
			t.Fatalf("fork %d: %+v %v, want %s running", i, got, err, want)
		}
		t.Cleanup(func() { s.Admin.TerminateSandbox(context.Background(), got.ID) })
		if m := e2etest.MustOK(t, s.Admin, got.ID, "cat /workspace/marker"); m != "before\n" {
			t.Fatalf("fork %s's marker: %q", got.ID, m)
		}
	}

	// The fork's snapshot is listed; deleting it is refused, naming the
	// forks, and it stays.
	var forkSnap string
	b.Run("the fork's snapshot",
		poll(`!!document.querySelector('#snap-rows tr.snap:not([data-name="`+snapName+`"])')`),
		chromedp.Evaluate(`document.querySelector('#snap-rows tr.snap:not([data-name="`+snapName+`"])').dataset.id`, &forkSnap),
	)
	// (The selector names what the step above read.)
	b.Run("delete it",
		chromedp.Click(`tr.snap[data-id="`+forkSnap+`"] button.delete`, chromedp.ByQuery),
		chromedp.WaitVisible("#snap-delete-dialog-yes", chromedp.ByID),
		chromedp.Click("#snap-delete-dialog-yes", chromedp.ByID),
		poll(`document.getElementById('snap-error').textContent.includes('in use by')`),
		chromedp.Text("#snap-error", &errText, chromedp.ByID),
		b.Shots2("snapshot-in-use"),
	)
	for _, id := range ids {
		if !strings.Contains(errText, id) {
			t.Fatalf("the refusal %q does not name fork %s", errText, id)
		}
	}
	if _, err := s.Admin.GetSnapshot(ctx, forkSnap); err != nil {
		t.Fatalf("the refused delete removed %s: %v", forkSnap, err)
	}

	// A snapshot nothing stands on goes, from the page and the API.
	spare := fmt.Sprintf("spare-%d", run)
	b.Run("take and delete a spare",
		chromedp.SendKeys("#snap-name", spare, chromedp.ByID),
		chromedp.Click("#snap-take", chromedp.ByID),
		chromedp.WaitVisible(`tr.snap[data-name="`+spare+`"]`, chromedp.ByQuery),
		chromedp.Click(`tr.snap[data-name="`+spare+`"] button.delete`, chromedp.ByQuery),
		chromedp.WaitVisible("#snap-delete-dialog-yes", chromedp.ByID),
		chromedp.Click("#snap-delete-dialog-yes", chromedp.ByID),
		poll(`document.getElementById('snap-result').textContent === 'Deleted `+spare+`.'`),
		chromedp.WaitNotPresent(`tr.snap[data-name="`+spare+`"]`, chromedp.ByQuery),
		poll(`document.getElementById('snap-error').textContent === ''`),
	)
	if _, err := s.Admin.GetSnapshot(ctx, spare); !notFound(err) {
		t.Fatalf("%s after delete: %v", spare, err)
	}

	// A fork's link opens its page.
	var title, path string
	b.Run("open a fork",
		chromedp.Click(`#fork-result li.fork[data-id="`+ids[0]+`"] a`, chromedp.ByQuery),
		poll(`document.getElementById('sb-name')?.textContent === `+jsStr(f1)),
		chromedp.Text("#sb-name", &title, chromedp.ByID),
		chromedp.Evaluate(`location.pathname`, &path),
	)
	if path != "/sandboxes/"+ids[0] {
		t.Fatalf("the fork's link went to %s (%q)", path, title)
	}
	b.Run("still clean", chromedp.Evaluate(cleanJS, &clean))
	if !clean {
		t.Fatal("markup became an element")
	}
}
