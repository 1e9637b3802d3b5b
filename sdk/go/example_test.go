package cove_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"time"

	"github.com/cove-dev/cove/api"
	cove "github.com/cove-dev/cove/sdk/go"
)

// exampleServer stands in for a cove server in the examples, which run as
// tests: it answers the few calls they make, and points COVE_URL at
// itself as a deployment would.
func exampleServer() func() {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/sandboxes", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"id":"sbx_1","name":"demo","state":"running","workdir":"/home/user"}`)
	})
	mux.HandleFunc("DELETE /v1/sandboxes/{ref}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"id":"sbx_1","state":"terminating"}`)
	})
	mux.HandleFunc("GET /v1/sandboxes/{ref}", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprintf(w, `{"error":{"code":"not_found","message":"sandbox %s not found"}}`, r.PathValue("ref"))
	})
	mux.HandleFunc("POST /v1/sandboxes/{ref}/commands", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("wait") == "" {
			fmt.Fprint(w, `{"id":"cmd_1","state":"running"}`)
			return
		}
		fmt.Fprint(w, `{"command":{"id":"cmd_1","state":"exited","exit_code":0},"stdout":"hello\n","stderr":""}`)
	})
	mux.HandleFunc("GET /v1/sandboxes/{ref}/commands/{id}/output", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, `{"seq":1,"stream":"stdout","data":"aGVsbG8K"}`)
		fmt.Fprintln(w, `{"seq":2,"type":"exit","exit_code":0}`)
	})
	mux.HandleFunc("GET /v1/events/stream", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "id: evt_1\ndata: {\"id\":\"evt_1\",\"type\":\"sandbox.running\",\"sandbox_id\":\"sbx_1\"}\n\n")
	})
	srv := httptest.NewServer(mux)
	os.Setenv("COVE_URL", srv.URL)
	os.Setenv("COVE_API_KEY", "cove_example")
	return func() {
		srv.Close()
		os.Unsetenv("COVE_URL")
		os.Unsetenv("COVE_API_KEY")
	}
}

// A client reads the server's URL and the API key from COVE_URL and
// COVE_API_KEY; options override them and set the HTTP client, the
// User-Agent and a per-call timeout.
func ExampleNewClient() {
	defer exampleServer()()
	ctx := context.Background()
	c := cove.NewClient(
		cove.WithUserAgent("my-agent/1.0"),
		cove.WithTimeout(30*time.Second),
		cove.WithHTTPClient(&http.Client{}),
	)
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Name: "demo"}, true)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.TerminateSandbox(context.WithoutCancel(ctx), sb.ID)
	fmt.Println(sb.Name, sb.State)
	// Output: demo running
}

// ExecWait runs a command to its end and returns its output and exit code.
func ExampleClient_ExecWait() {
	defer exampleServer()()
	c := cove.NewClient()
	res, err := c.ExecWait(context.Background(), "demo", api.CreateCommandRequest{Command: "echo hello"})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("exit %d: %s", *res.Command.ExitCode, res.Stdout)
	// Output: exit 0: hello
}

// Output streams a command's output as it runs; after a cut it resumes
// from the last sequence number on its own, so each record comes once.
func ExampleClient_Output() {
	defer exampleServer()()
	ctx := context.Background()
	c := cove.NewClient()
	cmd, err := c.Exec(ctx, "demo", api.CreateCommandRequest{Command: "echo hello"})
	if err != nil {
		fmt.Println(err)
		return
	}
	err = c.Output(ctx, "demo", cmd.ID, 0, true, func(r api.OutputRecord) error {
		if r.Type == "exit" {
			fmt.Println("exit", *r.ExitCode)
		} else {
			fmt.Printf("%s: %s", r.Stream, r.Data)
		}
		return nil
	})
	if err != nil {
		fmt.Println(err)
	}
	// Output:
	// stdout: hello
	// exit 0
}

// FollowEvents calls fn for each event of the team as it happens,
// reconnecting with Last-Event-ID after a cut, until ctx ends or fn fails.
func ExampleClient_FollowEvents() {
	defer exampleServer()()
	c := cove.NewClient()
	errEnough := errors.New("enough")
	err := c.FollowEvents(context.Background(), cove.EventQuery{}, func(e api.Event) error {
		fmt.Println(e.Type, e.SandboxID)
		return errEnough
	})
	fmt.Println(errors.Is(err, errEnough))
	// Output:
	// sandbox.running sbx_1
	// true
}

// Every failure is a *cove.Error with the API's code and the HTTP status;
// a failure to reach the server has code unavailable and status 0.
func ExampleError() {
	defer exampleServer()()
	c := cove.NewClient()
	_, err := c.GetSandbox(context.Background(), "missing")
	var e *cove.Error
	if errors.As(err, &e) {
		fmt.Println(e.Code, e.Status, e.Message)
	}
	// Output: not_found 404 sandbox missing not found
}

// A create carries an Idempotency-Key, so the SDK retries it safely after
// a cut; pass your own key to retry it across restarts of your program
// and still get one sandbox.
func ExampleWithIdempotencyKey() {
	defer exampleServer()()
	c := cove.NewClient()
	ctx := cove.WithIdempotencyKey(context.Background(), "task-42-sandbox")
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Name: "demo"}, true)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(sb.ID)
	// Output: sbx_1
}

// An Excluder follows .gitignore: anchored, directory-only, ** and
// negated patterns.
func ExampleNewExcluder() {
	ex, err := cove.NewExcluder([]string{"/dist", "cache/", "**/gen/**", "*.env", "!keep.env"})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, p := range []struct {
		rel string
		dir bool
	}{{"dist", true}, {"src/dist", true}, {"cache", true}, {"cache", false}, {"a/gen/b.go", false}, {"x.env", false}, {"keep.env", false}} {
		fmt.Println(p.rel, p.dir, ex.Excluded(p.rel, p.dir))
	}
	// Output:
	// dist true true
	// src/dist true false
	// cache true true
	// cache false false
	// a/gen/b.go false true
	// x.env false true
	// keep.env false false
}
