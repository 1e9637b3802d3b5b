package consolestorage

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/browsertest"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
)

// getVolume reads a volume by ID or name (GET /v1/volumes/{ref}) and
// answers its status.
func getVolume(t *testing.T, s *e2etest.Server, ref string) (int, api.Volume) {
	t.Helper()
	code, _, body := e2etest.RawRequest(t, http.MethodGet, s.URL+"/v1/volumes/"+ref, s.AdminKey, "")
	var v api.Volume
	if code == http.StatusOK {
		if err := json.Unmarshal(body, &v); err != nil {
			t.Fatalf("volume %s: %v: %s", ref, err, body)
		}
	}
	return code, v
}

// TestVolumes: the team page (reached from the top bar) creates a volume,
// lists it with its size, the bytes used as the API measures them and
// the sandbox that mounts it (linked to its page, whose header names the
// mount), refuses to delete it while it is mounted with the API's
// message naming the sandbox, and deletes it once the sandbox is gone.
// A name with markup comes back in the API's message as text.
func TestVolumes(t *testing.T) {
	s := e2etest.StartServer(t, e2etest.WithManaged)
	b := browsertest.New(t, s.URL, 8*time.Minute)
	ctx := context.Background()
	run := time.Now().UnixNano() % 100000

	b.SignIn(s.URL, s.AdminKey, "#team-link")
	b.Run("team page",
		chromedp.Click("#team-link", chromedp.ByID),
		chromedp.WaitVisible("#vol-form", chromedp.ByID),
		poll(`document.getElementById('vol-rows').dataset.loaded === '0'`),
		poll(`document.getElementById('team-name').textContent === 'Team admin'`),
	)
	var path string
	b.Run("its address", chromedp.Evaluate(`location.pathname`, &path))
	if path != "/team" {
		t.Fatalf("the Team link went to %s", path)
	}

	// Hostile: the API's message echoes the name it refused; it shows as
	// text.
	hostile := `<img src=x onerror="window.pwned=1">`
	var errText string
	var clean bool
	b.Run("a name with markup",
		chromedp.SendKeys("#vol-name", hostile, chromedp.ByID),
		chromedp.Click("#vol-create", chromedp.ByID),
		poll(`document.getElementById('vol-error').textContent.includes('<img src=x')`),
		chromedp.Sleep(300*time.Millisecond), // an image would have loaded and failed by now
		chromedp.Text("#vol-error", &errText, chromedp.ByID),
		chromedp.Evaluate(cleanJS, &clean),
	)
	if !clean || !strings.HasPrefix(errText, "Could not create the volume: ") {
		t.Fatalf("error %q; markup stayed text: %v", errText, clean)
	}

	name := fmt.Sprintf("data-%d", run)
	row := `tr.vol[data-name="` + name + `"]`
	b.Run("create",
		chromedp.Evaluate(`document.getElementById('vol-name').value = ''`, nil),
		chromedp.SendKeys("#vol-name", name, chromedp.ByID),
		chromedp.Evaluate(`document.getElementById('vol-size').value = '64'`, nil),
		chromedp.Click("#vol-create", chromedp.ByID),
		chromedp.WaitVisible(row, chromedp.ByQuery),
		poll(`document.getElementById('vol-result').textContent.startsWith('Created `+name+`')`),
		poll(`document.getElementById('vol-error').textContent === ''`),
	)
	code, vol := getVolume(t, s, name)
	if code != http.StatusOK || vol.SizeMiB != 64 || !strings.HasPrefix(vol.ID, "vol_") {
		t.Fatalf("the volume the page created: %d %+v", code, vol)
	}
	var size, rowID string
	b.Run("its row",
		chromedp.AttributeValue(row, "data-id", &rowID, nil, chromedp.ByQuery),
		chromedp.Text(row+` td[data-label="Size"]`, &size, chromedp.ByQuery),
	)
	if rowID != vol.ID || size != "64.0 MiB" {
		t.Fatalf("row: ID %q size %q, want %s 64.0 MiB", rowID, size, vol.ID)
	}

	// A sandbox mounts it and writes 5 MiB; the page follows.
	sb := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{
		Name:    fmt.Sprintf("voluser-%d", run),
		Volumes: []api.VolumeMount{{Name: name, Path: "/mnt/data"}},
	})
	t.Cleanup(func() { s.Admin.TerminateSandbox(context.Background(), sb.ID) })
	e2etest.MustOK(t, s.Admin, sb.ID, "dd if=/dev/urandom of=/mnt/data/blob bs=1M count=5 2>/dev/null && sync")
	b.Run("mounted by the sandbox",
		poll(`document.querySelector(`+jsStr(row)+`)?.dataset.sandboxes === `+jsStr(sb.ID)),
		chromedp.WaitVisible(row+` td.mounts a`, chromedp.ByQuery),
	)
	// Used bytes: what the API measured, once it has measured the blob.
	for i := 0; ; i++ {
		_, vol = getVolume(t, s, name)
		if vol.UsedBytes >= 5<<20 {
			break
		}
		if i == 120 {
			t.Fatalf("the API's used_bytes stayed %d after a 5 MiB write", vol.UsedBytes)
		}
		time.Sleep(time.Second)
	}
	var usedAttr, usedText string
	b.Run("used",
		chromedp.Navigate(s.URL+"/team"),
		chromedp.WaitVisible(row, chromedp.ByQuery),
		chromedp.AttributeValue(row, "data-used", &usedAttr, nil, chromedp.ByQuery),
		chromedp.Text(row+` td.used`, &usedText, chromedp.ByQuery),
		b.Shots2("volumes"),
	)
	used, _ := strconv.ParseInt(usedAttr, 10, 64)
	if used < 5<<20 || !strings.Contains(usedText, "MiB") {
		t.Fatalf("page shows used %q (%q), the API %d", usedAttr, usedText, vol.UsedBytes)
	}

	// In use: the delete is refused with the API's message naming the
	// sandbox, and the volume stays.
	b.Run("delete while mounted",
		chromedp.Click(row+` button.delete`, chromedp.ByQuery),
		chromedp.WaitVisible("#vol-delete-dialog-yes", chromedp.ByID),
		chromedp.Click("#vol-delete-dialog-yes", chromedp.ByID),
		poll(`document.getElementById('vol-error').textContent.includes(`+jsStr(sb.ID)+`)`),
		chromedp.Text("#vol-error", &errText, chromedp.ByID),
		b.Shots2("volume-in-use"),
	)
	if !strings.HasPrefix(errText, "Could not delete "+name+": ") {
		t.Fatalf("refusal shown as %q", errText)
	}
	if code, _ := getVolume(t, s, name); code != http.StatusOK {
		t.Fatalf("the refused delete removed the volume: %d", code)
	}

	// The sandbox's link opens its page, whose header names the mount.
	var mounts string
	b.Run("the sandbox's page",
		chromedp.Click(row+` td.mounts a`, chromedp.ByQuery),
		chromedp.WaitVisible(`#sb-facts dd[data-fact="volumes"]`, chromedp.ByQuery),
		chromedp.Text(`#sb-facts dd[data-fact="volumes"]`, &mounts, chromedp.ByQuery),
		chromedp.Evaluate(`location.pathname`, &path),
	)
	if path != "/sandboxes/"+sb.ID || mounts != name+" at /mnt/data" {
		t.Fatalf("at %s the header's volumes %q", path, mounts)
	}

	// Once the sandbox is gone the page (following the events) shows no
	// mount, and the delete goes.
	b.Run("back to the team page",
		chromedp.Click("#team-link", chromedp.ByID),
		chromedp.WaitVisible(row, chromedp.ByQuery),
	)
	if _, err := s.Admin.TerminateSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	b.Run("delete",
		poll(`document.querySelector(`+jsStr(row)+`)?.dataset.sandboxes === ''`),
		chromedp.Click(row+` button.delete`, chromedp.ByQuery),
		chromedp.WaitVisible("#vol-delete-dialog-yes", chromedp.ByID),
		chromedp.Click("#vol-delete-dialog-yes", chromedp.ByID),
		poll(`document.getElementById('vol-result').textContent === 'Deleted `+name+`.'`),
		chromedp.WaitNotPresent(row, chromedp.ByQuery),
		poll(`document.getElementById('vol-error').textContent === ''`),
		chromedp.Evaluate(cleanJS, &clean),
	)
	if code, _ := getVolume(t, s, name); code != http.StatusNotFound || !clean {
		t.Fatalf("after delete: %d; clean %v", code, clean)
	}
}
