package tls

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/chromedp"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/browsertest"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
	cove "github.com/cove-dev/cove/sdk/go"
)

func poll(js string) chromedp.Action { return browsertest.Poll(js, 30*time.Second) }

func jsStr(s string) string { return fmt.Sprintf("%q", s) }

// nssHome is a HOME whose NSS database (~/.pki/nssdb, where Chromium on
// Linux reads the certificates a user trusts) trusts the CA to identify
// servers: how a user trusts a private CA in Chromium, with Debian's
// certutil.
func nssHome(t *testing.T, ca *testCA) string {
	t.Helper()
	certutil, err := exec.LookPath("certutil")
	if err != nil {
		t.Fatal("certutil is missing (make test-deps installs libnss3-tools)")
	}
	home := t.TempDir()
	db := filepath.Join(home, ".pki", "nssdb")
	if err := os.MkdirAll(db, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"-N", "-d", "sql:" + db, "--empty-password"},
		{"-A", "-d", "sql:" + db, "-n", "cove e2e CA", "-t", "C,,", "-i", ca.File},
	} {
		if out, err := exec.Command(certutil, args...).CombinedOutput(); err != nil {
			t.Fatalf("certutil %v: %v\n%s", args, err, out)
		}
	}
	return home
}

// pageCrypto is what the page says of its context: secure or not, and
// whether it has WebCrypto's digest.
func pageCrypto(b *browsertest.Browser) (secure, subtle bool, origin string) {
	b.Run("the page's context",
		chromedp.Evaluate(`window.isSecureContext`, &secure),
		chromedp.Evaluate(`typeof globalThis.crypto?.subtle?.digest === 'function'`, &subtle),
		chromedp.Evaluate(`location.origin`, &origin),
	)
	return secure, subtle, origin
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

// verifiedFiles uploads a file with the console's picker (the upload
// carries the sha-256 the page computed, which the server checks), then
// downloads it with the console's verified download, which must verify
// with the file's sha-256; the same download with the announced digest
// changed on the way must not.
func verifiedFiles(t *testing.T, b *browsertest.Browser, base string, c *cove.Client, sb api.Sandbox) {
	wd := sb.Workdir
	if wd == "" {
		wd = "/home/user"
	}
	up := make([]byte, 300<<10)
	for i := range up {
		up[i] = byte(i*131 + i/977)
	}
	local := filepath.Join(t.TempDir(), "picked.bin")
	if err := os.WriteFile(local, up, 0o644); err != nil {
		t.Fatal(err)
	}
	remote := wd + "/picked.bin"
	b.Run("upload with the picker",
		chromedp.Navigate(base+"/sandboxes/"+sb.ID+"/files"),
		chromedp.WaitVisible("#files-pick", chromedp.ByID),
		chromedp.SetUploadFiles("#files-pick", []string{local}, chromedp.ByID),
		poll(`document.getElementById('files-upstatus').dataset.uploaded === `+jsStr(remote)),
	)
	if got := readFile(t, c, sb.ID, remote); sha256.Sum256(got) != sha256.Sum256(up) {
		t.Fatalf("picked.bin landed with %d bytes and another sha-256", len(got))
	}

	sum := sha256.Sum256(up)
	var verifiedSum, note string
	b.Run("verified download",
		chromedp.WaitVisible(`button[data-path=`+jsStr(remote)+`]`, chromedp.ByQuery),
		chromedp.Click(`button[data-path=`+jsStr(remote)+`]`, chromedp.ByQuery),
		poll(`document.getElementById('file-note').textContent.includes('binary')`),
		chromedp.Evaluate(`document.getElementById('file-verified').removeAttribute('data-verified')`, nil),
		chromedp.Click("#file-download", chromedp.ByID),
		poll(`document.getElementById('file-verified').dataset.verified !== undefined`),
		chromedp.AttributeValue("#file-verified", "data-sha256", &verifiedSum, nil, chromedp.ByID),
		chromedp.Text("#file-verified", &note, chromedp.ByID),
	)
	if verifiedSum != hex.EncodeToString(sum[:]) || note != "verified sha-256" {
		var status string
		b.Run("status", chromedp.Text("#file-status", &status, chromedp.ByID))
		t.Fatalf("the download shows %q with sha-256 %q (status %q), want %q verified", note, verifiedSum, status, hex.EncodeToString(sum[:]))
	}

	// The announced digest changed on the way: the bytes are not verified.
	other := sha256.Sum256([]byte("something else"))
	tampered := "sha-256=:" + base64.StdEncoding.EncodeToString(other[:]) + ":"
	lctx, stop := context.WithCancel(b.Ctx)
	defer stop()
	chromedp.ListenTarget(lctx, func(ev any) {
		e, ok := ev.(*fetch.EventRequestPaused)
		if !ok {
			return
		}
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
		chromedp.Evaluate(`document.getElementById('file-verified').removeAttribute('data-verified')`, nil),
		fetch.Enable().WithPatterns([]*fetch.RequestPattern{{URLPattern: "*/files/content?*", RequestStage: fetch.RequestStageResponse}}),
		chromedp.Click("#file-download", chromedp.ByID),
		poll(`document.getElementById('file-verified').dataset.verified === 'false'`),
		fetch.Disable(),
		chromedp.Text("#file-verified", &note, chromedp.ByID),
	)
	if note == "verified sha-256" {
		t.Fatalf("a tampered download shows %q", note)
	}
	t.Logf("tampered download: %q", note)
}

// requireConsole skips the test when the binary was built without the
// console (make build builds it).
func requireConsole(t *testing.T, hc *http.Client, url string) {
	t.Helper()
	resp, err := hc.Get(url + "/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.Contains(string(page), "console is not built") {
		t.Skip("this cove binary was built without the console (make build builds it)")
	}
}

// testConsoleTLS: Chromium trusts the CA through the NSS database of its
// user, loads the console from https://127.0.0.1, and its verified upload
// and download work with WebCrypto; a Chromium without the CA refuses the
// server.
func testConsoleTLS(t *testing.T, s *tlsServer, ca *testCA) {
	sb := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{Name: name("console")})

	// Without the CA in its NSS database, Chromium refuses the server.
	plain := browsertest.Start(t, 2*time.Minute, chromedp.Env("HOME="+t.TempDir()))
	err := chromedp.Run(plain.Ctx, chromedp.Navigate(s.URL+"/"))
	for try := 0; try < 2 && err != nil && strings.Contains(err.Error(), "ERR_NETWORK_CHANGED"); try++ {
		err = chromedp.Run(plain.Ctx, chromedp.Navigate(s.URL+"/")) // other tests' interfaces came or went
	}
	if err == nil || !strings.Contains(err.Error(), "ERR_CERT_AUTHORITY_INVALID") {
		t.Fatalf("Chromium without the CA loaded %s: %v, want ERR_CERT_AUTHORITY_INVALID", s.URL, err)
	}

	requireConsole(t, ca.httpClient(), s.URL)
	b := browsertest.Start(t, 4*time.Minute, chromedp.Env("HOME="+nssHome(t, ca)))
	b.SignIn(s.URL, s.AdminKey, `tr[data-id="`+sb.ID+`"]`)
	secure, subtle, origin := pageCrypto(b)
	if !secure || !subtle || origin != s.URL {
		t.Fatalf("the console at %s: secure context %v, WebCrypto %v; want both", origin, secure, subtle)
	}
	verifiedFiles(t, b, s.URL, s.Admin, sb)
}

// TestConsoleInsecureOrigin: the console served in plain HTTP under a
// name that is not loopback (Chromium maps it to 127.0.0.1 itself, so no
// traffic leaves the host) is not a secure context: the browser gives the
// page no WebCrypto. The verified upload and download still work, on the
// console's own sha-256, and a tampered digest is still caught.
func TestConsoleInsecureOrigin(t *testing.T) {
	s := e2etest.StartServer(t)
	sb := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{Name: name("plain")})
	_, port, ok := strings.Cut(s.Listeners()["api"], ":")
	if !ok {
		t.Fatalf("api address %q", s.Listeners()["api"])
	}
	host := "cove-" + e2etest.RunID() + ".invalid"
	base := "http://" + host + ":" + port
	requireConsole(t, http.DefaultClient, s.URL)
	b := browsertest.Start(t, 4*time.Minute, chromedp.Flag("host-resolver-rules", "MAP "+host+" 127.0.0.1"))
	b.SignIn(base, s.AdminKey, `tr[data-id="`+sb.ID+`"]`)
	secure, subtle, origin := pageCrypto(b)
	if secure || subtle || origin != base {
		t.Fatalf("the console at %s: secure context %v, WebCrypto %v; want neither", origin, secure, subtle)
	}
	verifiedFiles(t, b, base, s.Admin, sb)
}
