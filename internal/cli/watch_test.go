package cli

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestWatch: `cove watch` asks for the directory's watch (recursive,
// after), prints a line per record, and resumes a cut stream after the
// last record it printed; a bad argument is one line and a non-zero exit.
func TestWatch(t *testing.T) {
	var queries []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/sandboxes/sb/files/watch" {
			http.NotFound(w, r)
			return
		}
		queries = append(queries, r.URL.RawQuery)
		w.Header().Set("Content-Type", "application/x-ndjson")
		switch len(queries) {
		case 1:
			fmt.Fprintln(w, `{"seq":11,"type":"create","path":"/workspace/d","entry":{"name":"d","path":"/workspace/d","type":"dir"}}`)
			fmt.Fprintln(w, ``)
			fmt.Fprintln(w, `{"seq":12,"type":"write","path":"/workspace/d/f","entry":{"name":"f","path":"/workspace/d/f","type":"file","size":3}}`)
			// Cut: the stream breaks mid-record.
			hj, _ := w.(http.Hijacker)
			w.(http.Flusher).Flush()
			conn, _, _ := hj.Hijack()
			conn.Close()
		default:
			fmt.Fprintln(w, `{"seq":13,"type":"dropped","count":40}`)
			fmt.Fprintln(w, `{"seq":14,"type":"remove","path":"/workspace/d/f"}`)
		}
	}))
	defer srv.Close()
	run := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		env := Env{
			Args: args, Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb,
			Getenv: func(k string) string {
				return map[string]string{"COVE_URL": srv.URL, "COVE_API_KEY": "k"}[k]
			},
		}
		return Main(context.Background(), env), out.String(), errb.String()
	}
	code, out, errs := run("watch", "sb", "/workspace", "-r", "--after", "10")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	want := "11  create /workspace/d/\n12  write  /workspace/d/f  (3 bytes)\n13  dropped  40 changes not reported\n14  remove /workspace/d/f\n"
	if out != want {
		t.Errorf("output:\n%s\nwant:\n%s", out, want)
	}
	if len(queries) != 2 || queries[0] != "after=10&path=%2Fworkspace&recursive=true" || queries[1] != "after=12&path=%2Fworkspace&recursive=true" {
		t.Errorf("queries %q: want after=10, then after=12 on the reconnect", queries)
	}
	code, _, errs = run("watch", "sb")
	if code == 0 || strings.Count(strings.TrimSpace(errs), "\n") != 0 {
		t.Errorf("missing PATH: exit %d, stderr %q", code, errs)
	}
}
