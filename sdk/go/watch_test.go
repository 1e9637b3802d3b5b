package cove

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
)

// TestWatchFilesResumesAfterACut: a watch cut mid-stream is reopened with
// after= the last record's seq, so fn sees each record once, in order; the
// server's clean end of the stream ends WatchFiles with nil.
func TestWatchFilesResumesAfterACut(t *testing.T) {
	var rec recorder
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch rec.add(r) {
		case 1:
			hijackCut(t, w, "application/x-ndjson", `{"seq":5,"type":"create","path":"/w/a"}`+"\n"+`{"seq":6,"type":"wri`)
		default:
			w.Header().Set("Content-Type", "application/x-ndjson")
			fmt.Fprintln(w, `{"seq":6,"type":"write","path":"/w/a","entry":{"path":"/w/a","type":"file","size":2}}`)
			fmt.Fprintln(w)
			fmt.Fprintln(w, `{"seq":7,"type":"dropped","count":12}`)
		}
	}))
	defer srv.Close()
	c := New(srv.URL, "k")
	c.sleep = func(ctx context.Context, d time.Duration) error { return nil }
	var got []string
	err := c.WatchFiles(t.Context(), "sb", WatchQuery{Path: "/w", Recursive: true, After: 4}, func(ev api.FileEvent) error {
		got = append(got, fmt.Sprintf("%d:%s:%s:%d", ev.Seq, ev.Type, ev.Path, ev.Count))
		return nil
	})
	if err != nil {
		t.Fatalf("a watch the server ended: %v", err)
	}
	if want := "[5:create:/w/a:0 6:write:/w/a:0 7:dropped::12]"; fmt.Sprint(got) != want {
		t.Errorf("records %v, want %s", got, want)
	}
	if len(rec.reqs) != 2 {
		t.Fatalf("%d requests", len(rec.reqs))
	}
	for i, want := range []string{"4", "5"} {
		q := rec.reqs[i].URL.Query()
		if q.Get("after") != want || q.Get("path") != "/w" || q.Get("recursive") != "true" || rec.reqs[i].URL.Path != "/v1/sandboxes/sb/files/watch" {
			t.Errorf("request %d: %s", i, rec.reqs[i].URL)
		}
	}
}
