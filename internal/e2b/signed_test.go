package e2b

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/store"
)

// planeStore is the store's view of the fake plane: sandboxes of every
// team, by ID.
type planeStore struct{ f *fakePlane }

func (s planeStore) GetSandbox(_ context.Context, teamID, id string) (api.Sandbox, error) {
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	for _, sb := range s.f.sandboxes {
		if sb.ID == id && (teamID == "" || sb.TeamID == teamID) {
			return sb, nil
		}
	}
	return api.Sandbox{}, api.Errorf(api.CodeNotFound, "sandbox %s not found", id)
}

func (s planeStore) ListSandboxes(_ context.Context, f store.SandboxFilter) ([]api.Sandbox, error) {
	s.f.mu.Lock()
	all := slices.Clone(s.f.sandboxes)
	s.f.mu.Unlock()
	slices.SortFunc(all, func(a, b api.Sandbox) int { return strings.Compare(a.ID, b.ID) })
	var out []api.Sandbox
	for _, sb := range all {
		if sb.ID <= f.After || (f.TeamID != "" && sb.TeamID != f.TeamID) || (len(f.States) > 0 && !slices.Contains(f.States, sb.State)) {
			continue
		}
		if f.Limit > 0 && len(out) == f.Limit {
			break
		}
		out = append(out, sb)
	}
	return out, nil
}

// signedURL is what the SDKs' downloadUrl and uploadUrl make.
func (h *harness) signedURL(p, op, user, token string, expires time.Time) string {
	q := url.Values{}
	if p != "" {
		q.Set("path", p)
	}
	if user != "" {
		q.Set("username", user)
	}
	exp := ""
	if !expires.IsZero() {
		exp = strconv.FormatInt(expires.Unix(), 10)
		q.Set("signature_expiration", exp)
	}
	q.Set("signature", Signature(p, op, user, token, exp))
	return h.side.URL + "/files?" + q.Encode()
}

// fetch sends a request as a browser would: no header but hdr.
func fetch(t *testing.T, method, u string, hdr http.Header, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, u, strings.NewReader(body))
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestSignature is E2B's own example: the SDK's getSignature of
// path:operation:user:token[:expiration].
func TestSignature(t *testing.T) {
	// The SDK's getSignature("hello.txt", "read", undefined, "tok", exp):
	// sha256 of the string below in unpadded standard base64.
	if got, want := Signature("hello.txt", "read", "", "tok", "1700000000"), "v1_EUu2ENlqKPzOY/NaOk0BqXuM7BkFsPEMrnoTb0VpeXc"; got != want {
		t.Errorf("signature %q; want %q", got, want)
	}
	if Signature("a", "read", "", "t", "") == Signature("a", "write", "", "t", "") ||
		Signature("a", "read", "", "t", "") == Signature("a", "read", "", "t", "1") ||
		Signature("a", "read", "", "t", "") == Signature("a", "read", "user", "t", "") {
		t.Error("a signature does not cover operation, expiration and user")
	}
}

// TestSignedURLs: a signed URL opens GET or POST /files of its sandbox
// with no header at all, for its operation, path and user only; an
// expired one gets E2B's exact 401; a signature made with one sandbox's
// token opens no other sandbox, of its team or another.
func TestSignedURLs(t *testing.T) {
	h := newHarness(t)
	other := h.create("key-b", map[string]any{"templateID": "base"}) // another team's, first in ID order
	sb := h.create("key-a", map[string]any{"templateID": "base"})
	h.files.data["/home/user/hello.txt"] = "hello world"
	h.files.data["/root/hello.txt"] = "root's"
	soon := time.Now().Add(time.Minute)

	if code, body := fetch(t, "GET", h.signedURL("hello.txt", "read", "", sb.EnvdAccessToken, soon), nil, ""); code != 200 || body != "hello world" {
		t.Errorf("signed download: %d %s", code, body)
	}
	if code, body := fetch(t, "GET", h.signedURL("hello.txt", "read", "root", sb.EnvdAccessToken, time.Time{}), nil, ""); code != 200 || body != "root's" {
		t.Errorf("signed download as root, no expiration: %d %s", code, body)
	}
	code, body := fetch(t, "POST", h.signedURL("up.txt", "write", "", sb.EnvdAccessToken, soon), http.Header{"Content-Type": {"application/octet-stream"}}, "uploaded")
	if code != 200 || h.files.data["/home/user/up.txt"] != "uploaded" {
		t.Errorf("signed upload: %d %s", code, body)
	}
	for _, target := range h.files.targets {
		if target.TeamID != "a" || target.Ref != sb.SandboxID {
			t.Fatalf("a signed call reached %+v", target)
		}
	}

	// Expired: E2B's body, word for word.
	code, body = fetch(t, "GET", h.signedURL("hello.txt", "read", "", sb.EnvdAccessToken, time.Now().Add(-10*time.Second)), nil, "")
	var e map[string]any
	json.Unmarshal([]byte(body), &e)
	if code != 401 || fmt.Sprint(e) != fmt.Sprint(map[string]any{"code": float64(401), "message": "signature is already expired"}) {
		t.Errorf("expired: %d %s", code, body)
	}

	n := len(h.files.targets)
	refused := map[string]struct {
		method, url string
		hdr         http.Header
	}{
		"read signature to write": {"POST", h.signedURL("hello.txt", "read", "", sb.EnvdAccessToken, soon), nil},
		"write signature to read": {"GET", h.signedURL("hello.txt", "write", "", sb.EnvdAccessToken, soon), nil},
		"another path":            {"GET", strings.Replace(h.signedURL("hello.txt", "read", "", sb.EnvdAccessToken, soon), "hello.txt", "other.txt", 1), nil},
		"another user":            {"GET", h.signedURL("hello.txt", "read", "", sb.EnvdAccessToken, soon) + "&username=root", nil},
		"later expiration":        {"GET", strings.Replace(h.signedURL("hello.txt", "read", "", sb.EnvdAccessToken, soon), "signature_expiration="+strconv.FormatInt(soon.Unix(), 10), "signature_expiration="+strconv.FormatInt(soon.Unix()+3600, 10), 1), nil},
		"made up":                 {"GET", h.side.URL + "/files?path=hello.txt&signature=v1_AAAA", nil},
		"a token not of cove's":   {"GET", h.signedURL("hello.txt", "read", "", "a.guess", soon), nil},
		"other sandbox's id":      {"GET", h.signedURL("hello.txt", "read", "", sb.EnvdAccessToken, soon), http.Header{"E2b-Sandbox-Id": {other.SandboxID}}},
		"other route":             {"GET", strings.Replace(h.signedURL("hello.txt", "read", "", sb.EnvdAccessToken, soon), "/files?", "/health?", 1), nil},
	}
	for name, tc := range refused {
		t.Run(name, func(t *testing.T) {
			code, body := fetch(t, tc.method, tc.url, tc.hdr, "x")
			var e errorBody
			json.Unmarshal([]byte(body), &e)
			if code != 401 || e.Code != 401 || e.Message == "" {
				t.Errorf("%d %s", code, body)
			}
		})
	}
	if len(h.files.targets) != n {
		t.Errorf("refused signatures reached files: %+v", h.files.targets[n:])
	}
	// With its own ID, it opens its own sandbox.
	if code, body := fetch(t, "GET", h.signedURL("hello.txt", "read", "", sb.EnvdAccessToken, soon), http.Header{"E2b-Sandbox-Id": {sb.SandboxID}}, ""); code != 200 || body != "hello world" {
		t.Errorf("with its sandbox's ID: %d %s", code, body)
	}

	// A sandbox that does not run opens nothing.
	h.plane.mu.Lock()
	h.plane.sandboxes[1].State = api.StateAsleep
	h.plane.mu.Unlock()
	if code, body := fetch(t, "GET", h.signedURL("hello.txt", "read", "", sb.EnvdAccessToken, soon), nil, ""); code != 401 {
		t.Errorf("asleep: %d %s", code, body)
	}
}

// TestSignedURLSearchPages: the search reads the running sandboxes a page
// at a time and finds one past the first page.
func TestSignedURLSearchPages(t *testing.T) {
	h := newHarness(t)
	h.plane.mu.Lock()
	for i := range signedPage + 10 {
		h.plane.sandboxes = append(h.plane.sandboxes, api.Sandbox{
			ID: fmt.Sprintf("sbx_a%05d", i), TeamID: "t", State: api.StateRunning, Labels: map[string]string{labelTemplate: "base"},
		})
	}
	h.plane.mu.Unlock()
	sb := h.create("key-z", map[string]any{"templateID": "base"}) // sbx_N sorts after sbx_a…
	h.files.data["/home/user/x"] = "found"
	if code, body := fetch(t, "GET", h.signedURL("x", "read", "", sb.EnvdAccessToken, time.Time{}), nil, ""); code != 200 || body != "found" {
		t.Errorf("past the first page: %d %s", code, body)
	}
}

// TestSignedSearchBudget: the searches of all signed URLs draw on one
// budget of candidates; past it a search is refused with 429 before it
// hashes, the budget comes back with time, and a request that names its
// sandbox is never refused by it.
func TestSignedSearchBudget(t *testing.T) {
	h := newHarness(t)
	now := time.Now()
	h.sandboxSide.now = func() time.Time { return now }
	h.plane.mu.Lock()
	for i := range signedPage + 10 {
		h.plane.sandboxes = append(h.plane.sandboxes, api.Sandbox{
			ID: fmt.Sprintf("sbx_a%05d", i), TeamID: "t", State: api.StateRunning, Labels: map[string]string{labelTemplate: "base"},
		})
	}
	h.plane.mu.Unlock()
	sb := h.create("key-z", map[string]any{"templateID": "base"})
	h.files.data["/home/user/x"] = "found"
	bad := h.signedURL("x", "read", "", "not-a-token", time.Time{})
	perSearch := signedPage + 10 + 1 // every E2B sandbox, the created one too
	searches := maxSignedCandidates / perSearch
	for i := range searches {
		if code, body := fetch(t, "GET", bad, nil, ""); code != 401 {
			t.Fatalf("search %d within the budget: %d %s", i, code, body)
		}
	}
	resp, err := http.Get(bad)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "1" || !strings.Contains(string(b), "E2b-Sandbox-Id") {
		t.Fatalf("search past the budget: %d %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), b)
	}
	named := http.Header{"E2b-Sandbox-Id": {sb.SandboxID}}
	if code, body := fetch(t, "GET", h.signedURL("x", "read", "", sb.EnvdAccessToken, time.Time{}), named, ""); code != 200 || body != "found" {
		t.Fatalf("a signed URL naming its sandbox, budget spent: %d %s", code, body)
	}
	now = now.Add(time.Second)
	if code, body := fetch(t, "GET", h.signedURL("x", "read", "", sb.EnvdAccessToken, time.Time{}), nil, ""); code != 200 || body != "found" {
		t.Fatalf("a search a second later: %d %s", code, body)
	}
}

// BenchmarkSignedCandidate is the work the search does per candidate: its
// token derived and the URL's signature computed.
func BenchmarkSignedCandidate(b *testing.B) {
	tokens, err := NewTokens(make([]byte, 32))
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		Signature("hello.txt", "read", "", tokens.Token("team_01m8x6nbcfeagrv0rnqd9fxqyd", "sbx_01m8x6ptytqpb8vfggby4249ch"), "1700000000")
	}
}
