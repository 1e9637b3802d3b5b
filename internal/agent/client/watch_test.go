package client

import (
	"fmt"
	"net/http"
	"testing"
)

// TestWatchChecksEvents: the host takes from an agent's watch only events
// of the watched directory with a path under it, clean, and entries that
// are their path's; anything else ends the watch with an error.
func TestWatchChecksEvents(t *testing.T) {
	entry := func(p string) string {
		return fmt.Sprintf(`{"name":"f","path":%q,"type":"file","size":1,"mode":420,"version":"AAAAAAAAAAAAAAAA","uid":0,"gid":0}`, p)
	}
	for _, tt := range []struct {
		name, line string
		ok         bool
	}{
		{"under the directory", `{"type":"create","path":"/w/a/f","entry":` + entry("/w/a/f") + `}`, true},
		{"the directory itself", `{"type":"remove","path":"/w"}`, true},
		{"a dropped record", `{"type":"dropped","count":3}`, true},
		{"a host path", `{"type":"create","path":"/var/lib/cove/sandboxes/x"}`, false},
		{"a sibling with the same prefix", `{"type":"create","path":"/w2/f"}`, false},
		{"climbing out", `{"type":"create","path":"/w/../etc/passwd"}`, false},
		{"relative", `{"type":"create","path":"w/f"}`, false},
		{"an entry of another path", `{"type":"write","path":"/w/f","entry":` + entry("/etc/shadow") + `}`, false},
		{"an unknown type", `{"type":"exec","path":"/w/f"}`, false},
		{"a dropped record without a count", `{"type":"dropped"}`, false},
		{"a second start", `{"type":"start"}`, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := fakeAgent(t, func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/v1/files/watch" || r.URL.Query().Get("path") != "/w" {
					http.NotFound(w, r)
					return
				}
				fmt.Fprintln(w, `{"type":"start"}`)
				fmt.Fprintln(w, tt.line)
			})
			fw, err := c.WatchFiles(t.Context(), "/w", true)
			if err != nil {
				t.Fatal(err)
			}
			defer fw.Close()
			_, err = fw.Next()
			if (err == nil) != tt.ok {
				t.Errorf("%s: err %v, want ok %v", tt.line, err, tt.ok)
			}
		})
	}
}
