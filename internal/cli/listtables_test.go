package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
)

// listServer answers the volume and snapshot lists two items a page, the
// second page after the cursor "p2"; with none, empty lists.
func listServer(t *testing.T, none bool) string {
	created := time.Date(2026, 3, 4, 10, 20, 30, 0, time.UTC)
	vols := []api.Volume{
		{ID: "vol_1", Name: "cache", SizeMiB: 64, UsedBytes: 1 << 20, Sandboxes: []string{"sbx_a", "sbx_b"}, CreatedAt: created},
		{ID: "vol_2", Name: "a-much-longer-name", SizeMiB: 16384, CreatedAt: created.Add(time.Hour)},
		{ID: "vol_3", Name: "x", SizeMiB: 16, UsedBytes: 4096, Sandboxes: []string{"sbx_c"}, CreatedAt: created.Add(2 * time.Hour)},
	}
	snaps := []api.Snapshot{
		{ID: "snp_1", Name: "base", SandboxID: "sbx_a", SizeBytes: 123456789, CreatedAt: created},
		{ID: "snp_2", Name: "after-install", SandboxID: "sbx_long_identifier", SizeBytes: 0, CreatedAt: created.Add(time.Minute)},
		{ID: "snp_3", Name: "z", SandboxID: "sbx_b", SizeBytes: 42, CreatedAt: created.Add(time.Second)},
	}
	if none {
		vols, snaps = nil, nil
	}
	page := func(w http.ResponseWriter, r *http.Request, items any, n int) {
		w.Header().Set("Content-Type", "application/json")
		from, to, next := 0, 2, "p2"
		if n == 0 {
			to, next = 0, ""
		}
		if r.URL.Query().Get("cursor") == "p2" {
			from, to, next = 2, n, ""
		}
		switch items := items.(type) {
		case []api.Volume:
			json.NewEncoder(w).Encode(api.List[api.Volume]{Items: items[from:to], NextCursor: next})
		case []api.Snapshot:
			json.NewEncoder(w).Encode(api.List[api.Snapshot]{Items: items[from:to], NextCursor: next})
		}
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/volumes":
			page(w, r, vols, len(vols))
		case "/v1/snapshots":
			page(w, r, snaps, len(snaps))
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestListTables: `cove volume ls` and `cove snapshot ls` print every page
// as an aligned table, or as one JSON list under --json (an empty one as
// [], not null), byte for byte.
func TestListTables(t *testing.T) {
	full, empty := listServer(t, false), listServer(t, true)
	for _, tc := range []struct {
		url    string
		args   []string
		golden string
	}{
		{full, []string{"volume", "ls"}, "volume-ls"},
		{full, []string{"volume", "ls", "--json"}, "volume-ls-json"},
		{full, []string{"snapshot", "ls"}, "snapshot-ls"},
		{full, []string{"snapshot", "ls", "--json"}, "snapshot-ls-json"},
		{empty, []string{"volume", "ls"}, "volume-ls-empty"},
		{empty, []string{"volume", "ls", "--json"}, "volume-ls-empty-json"},
		{empty, []string{"snapshot", "ls"}, "snapshot-ls-empty"},
		{empty, []string{"snapshot", "ls", "--json"}, "snapshot-ls-empty-json"},
	} {
		golden := filepath.Join("testdata", "lists", tc.golden+".golden")
		want, err := os.ReadFile(golden)
		if err != nil {
			t.Fatal(err)
		}
		var out, errb bytes.Buffer
		code := Main(context.Background(), Env{
			Args: tc.args, Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb,
			Getenv: func(k string) string { return map[string]string{"COVE_URL": tc.url, "COVE_API_KEY": "k"}[k] },
		})
		if code != 0 || out.String() != string(want) {
			t.Errorf("cove %s: exit %d, stderr %q, out\n%s\nwant (%s)\n%s", strings.Join(tc.args, " "), code, errb.String(), out.String(), golden, want)
		}
	}
}
