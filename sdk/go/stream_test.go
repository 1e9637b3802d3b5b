package cove

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/cove-dev/cove/api"
)

func TestReadSSE(t *testing.T) {
	in := ": comment\nid: 1\nevent: e\ndata: {\"a\":\ndata:  1}\n\nid: 2\r\ndata:x\r\n\r\ndata: no end"
	var got []sseEvent
	if err := readSSE(strings.NewReader(in), func(e sseEvent) error { got = append(got, e); return nil }); err != nil {
		t.Fatal(err)
	}
	want := []sseEvent{{id: "1", event: "e", data: "{\"a\":\n 1}"}, {id: "2", data: "x"}}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(sseEvent{})); diff != "" {
		t.Errorf("(-want +got)\n%s", diff)
	}
}

// hijackCut writes what it is given on the raw connection and closes it:
// a stream cut in the middle.
func hijackCut(t *testing.T, w http.ResponseWriter, head, body string) {
	t.Helper()
	conn, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		t.Error(err)
		return
	}
	defer conn.Close()
	fmt.Fprintf(buf, "HTTP/1.1 200 OK\r\nContent-Type: %s\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n", head, len(body), body)
	buf.Flush()
}

func TestFollowEventsResumesAfterACut(t *testing.T) {
	var rec recorder
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch rec.add(r) {
		case 1:
			hijackCut(t, w, "text/event-stream", "id: ev_1\ndata: {\"id\":\"ev_1\",\ndata: \"type\":\"a\"}\n\n")
		default:
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "id: ev_2\ndata: {\"id\":\"ev_2\",\"type\":\"b\"}\n\n")
		}
	}))
	defer srv.Close()
	c := New(srv.URL, "k")
	c.sleep = func(ctx context.Context, d time.Duration) error { return nil }
	var got []string
	errStop := fmt.Errorf("stop")
	err := c.FollowEvents(t.Context(), EventQuery{}, func(e api.Event) error {
		got = append(got, e.ID+"/"+e.Type)
		if len(got) == 2 {
			return errStop
		}
		return nil
	})
	if err != errStop {
		t.Fatalf("FollowEvents = %v", err)
	}
	if want := []string{"ev_1/a", "ev_2/b"}; !cmp.Equal(got, want) {
		t.Errorf("events %v, want %v", got, want)
	}
	reqs := rec.requests()
	if len(reqs) != 2 || reqs[1].Header.Get("Last-Event-ID") != "ev_1" || reqs[1].URL.Query().Get("after") != "ev_1" {
		t.Errorf("resumed with Last-Event-ID %q after %q", reqs[1].Header.Get("Last-Event-ID"), reqs[1].URL.Query().Get("after"))
	}
}

func TestOutputResumesAfterACut(t *testing.T) {
	var rec recorder
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch rec.add(r) {
		case 1:
			hijackCut(t, w, "application/x-ndjson", `{"seq":1,"stream":"stdout","data":"aGk="}`+"\n"+`{"seq":3,"stream":"stdout","data":"aGk="}`+"\n")
		case 2:
			// The stream ends cleanly before the exit: resumed too.
			fmt.Fprintln(w, `{"seq":4,"stream":"stderr","data":"aGk="}`)
		default:
			fmt.Fprintln(w, `{"seq":5,"type":"exit","exit_code":0}`)
		}
	}))
	defer srv.Close()
	c := New(srv.URL, "k")
	c.sleep = func(ctx context.Context, d time.Duration) error { return nil }
	var seqs []int64
	if err := c.Output(t.Context(), "sb", "c", 0, true, func(r api.OutputRecord) error { seqs = append(seqs, r.Seq); return nil }); err != nil {
		t.Fatal(err)
	}
	if want := []int64{1, 3, 4, 5}; !cmp.Equal(seqs, want) {
		t.Errorf("seqs %v, want %v", seqs, want)
	}
	var afters []string
	for _, r := range rec.requests() {
		afters = append(afters, r.URL.Query().Get("after"))
	}
	if want := []string{"0", "3", "4"}; !cmp.Equal(afters, want) {
		t.Errorf("after = %v, want %v", afters, want)
	}
}
