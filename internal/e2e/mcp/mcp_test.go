// Package mcp tests `cove mcp` as a real subprocess, driven by the MCP Go
// SDK's client over stdio and over streamable HTTP, against a real server.
package mcp

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cove-dev/cove/internal/e2e/e2etest"
)

func TestMain(m *testing.M) { e2etest.Main(m) }

func coveCmd(s *e2etest.Server, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(e2etest.BinDir(), "cove"), args...)
	// The config file written at the server's first start names its URL
	// and admin key, as for any CLI run.
	cmd.Env = append(os.Environ(), "HOME="+s.Home, "COVE_URL=", "COVE_API_KEY=")
	return cmd
}

func TestMCPStdio(t *testing.T) {
	s := e2etest.StartServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "cove-test", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: coveCmd(s, "mcp")}, nil)
	if err != nil {
		t.Fatalf("connect to cove mcp: %v", err)
	}
	defer cs.Close()
	drive(ctx, t, cs)
}

func TestMCPHTTP(t *testing.T) {
	s := e2etest.StartServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := coveCmd(s, "mcp", "--http", "127.0.0.1:0")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
	}()
	// It names the address it bound on its first line.
	line, err := bufio.NewReader(stderr).ReadString('\n')
	if err != nil {
		t.Fatalf("cove mcp --http said nothing: %v", err)
	}
	_, rest, ok := strings.Cut(line, "on http://")
	if !ok {
		t.Fatalf("cove mcp --http: %q names no address", line)
	}
	endpoint := "http://" + strings.Fields(rest)[0]

	// Without a key: 401, and no tool runs.
	resp, err := http.Post(endpoint, "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("request without a key: %d, want 401", resp.StatusCode)
	}

	// With a key, but from a page of another site, or through a name that
	// rebinds to loopback: refused before any tool runs.
	for _, c := range []struct {
		name   string
		header map[string]string
	}{
		{"cross-site page", map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "http://pages.example"}},
		{"rebound name", map[string]string{"Host": "rebound.example"}},
	} {
		req, _ := http.NewRequest(http.MethodPost, endpoint, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer "+s.AdminKey)
		for k, v := range c.header {
			req.Header.Set(k, v)
		}
		if h, ok := c.header["Host"]; ok {
			req.Host = h
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s: %d, want 403", c.name, resp.StatusCode)
		}
	}

	hc := &http.Client{Transport: bearerTransport{key: s.AdminKey}}
	client := mcp.NewClient(&mcp.Implementation{Name: "cove-test", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: hc, DisableStandaloneSSE: true}, nil)
	if err != nil {
		t.Fatalf("connect to cove mcp --http: %v", err)
	}
	defer cs.Close()
	drive(ctx, t, cs)

	// A key of no team gets a tool error from the API, not a sandbox.
	bad := mcp.NewClient(&mcp.Implementation{Name: "cove-test", Version: "1"}, nil)
	bs, err := bad.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: &http.Client{Transport: bearerTransport{key: "cove_sk_nobody"}}, DisableStandaloneSSE: true}, nil)
	if err != nil {
		t.Fatalf("connect with an unknown key: %v", err)
	}
	defer bs.Close()
	if msg := callErr(ctx, t, bs, "list_sandboxes", map[string]any{}); !strings.Contains(msg, "unauthenticated") {
		t.Fatalf("list_sandboxes with an unknown key: %q, want unauthenticated", msg)
	}
}

type bearerTransport struct{ key string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return http.DefaultTransport.RoundTrip(r)
}

// call calls a tool that must succeed and decodes its structured result.
func call(ctx context.Context, t *testing.T, cs *mcp.ClientSession, name string, args map[string]any, out any) {
	t.Helper()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if res.IsError {
		t.Fatalf("%s: tool error: %s", name, textOf(res))
	}
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("%s: %v in %s", name, err, b)
	}
}

// callErr calls a tool that must fail with a tool error, and returns its
// message.
func callErr(ctx context.Context, t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) string {
	t.Helper()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: protocol error %v; want a tool error", name, err)
	}
	if !res.IsError {
		t.Fatalf("%s succeeded; want a tool error", name)
	}
	return textOf(res)
}

func textOf(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

type output struct {
	CommandID string `json:"command_id"`
	Done      bool   `json:"done"`
	ExitCode  *int   `json:"exit_code"`
	Stdout    string `json:"stdout"`
	Stderr    string `json:"stderr"`
	NextSeq   int64  `json:"next_seq"`
	More      bool   `json:"more"`
}

type fileVersion struct {
	Version string `json:"version"`
	Size    int64  `json:"size"`
}

// drive runs an agent's session through every tool.
func drive(ctx context.Context, t *testing.T, cs *mcp.ClientSession) {
	var names []string
	for tool, err := range cs.Tools(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		if tool.Description == "" {
			t.Errorf("tool %s has no description", tool.Name)
		}
		names = append(names, tool.Name)
	}
	for _, want := range []string{"create_sandbox", "list_sandboxes", "run_command", "command_output", "send_input",
		"read_file", "write_file", "edit_file", "list_files", "sandbox_network", "sleep_sandbox", "wake_sandbox", "snapshot_sandbox", "fork_sandbox", "terminate_sandbox"} {
		if !slices.Contains(names, want) {
			t.Errorf("tool %s is missing (have %v)", want, names)
		}
	}

	var sb struct {
		ID, State, Workdir string
	}
	call(ctx, t, cs, "create_sandbox", map[string]any{"name": "mcp-" + e2etest.RunID()}, &sb)
	if sb.ID == "" || sb.State != "running" {
		t.Fatalf("create_sandbox: %+v", sb)
	}
	var list struct {
		Sandboxes []struct{ ID string } `json:"sandboxes"`
	}
	call(ctx, t, cs, "list_sandboxes", map[string]any{"state": "running"}, &list)
	if !slices.ContainsFunc(list.Sandboxes, func(s struct{ ID string }) bool { return s.ID == sb.ID }) {
		t.Fatalf("list_sandboxes does not list %s: %+v", sb.ID, list)
	}

	// A command that waits for its input returns early, undone; its output
	// is read to the end afterwards.
	var first output
	call(ctx, t, cs, "run_command", map[string]any{
		"sandbox": sb.ID, "command": "echo ready; read x; seq 1 3000; echo got $x; exit 3", "stdin": true, "wait_s": 1,
	}, &first)
	if first.Done || first.CommandID == "" {
		t.Fatalf("run_command of a command waiting for input: %+v, want done false with an ID", first)
	}
	var sent struct{ Sent int }
	call(ctx, t, cs, "send_input", map[string]any{"sandbox": sb.ID, "command_id": first.CommandID, "input": "hello\n", "close": true}, &sent)
	if sent.Sent != 6 {
		t.Fatalf("send_input sent %d bytes, want 6", sent.Sent)
	}
	all := first.Stdout
	next := first.NextSeq
	for i := 0; ; i++ {
		var o output
		call(ctx, t, cs, "command_output", map[string]any{"sandbox": sb.ID, "command_id": first.CommandID, "after_seq": next, "wait_s": 30}, &o)
		all += o.Stdout
		next = o.NextSeq
		if o.Done {
			if o.ExitCode == nil || *o.ExitCode != 3 {
				t.Fatalf("exit code %v, want 3", o.ExitCode)
			}
			break
		}
		if i > 100 {
			t.Fatal("command_output never reached the exit")
		}
	}
	var want strings.Builder
	want.WriteString("ready\n")
	for i := 1; i <= 3000; i++ {
		want.WriteString(strconv.Itoa(i) + "\n")
	}
	want.WriteString("got hello\n")
	if all != want.String() {
		t.Fatalf("output read through run_command and command_output is not the command's output: %d bytes, want %d", len(all), want.Len())
	}

	// Files by version: a stale write is refused and changes nothing.
	path := sb.Workdir + "/notes.txt"
	var v1, v2 fileVersion
	call(ctx, t, cs, "write_file", map[string]any{"sandbox": sb.ID, "path": path, "content": "one\n", "expected_version": "none"}, &v1)
	call(ctx, t, cs, "write_file", map[string]any{"sandbox": sb.ID, "path": path, "content": "two\n", "expected_version": v1.Version}, &v2)
	if v2.Version == v1.Version {
		t.Fatalf("a write kept the version %s", v1.Version)
	}
	if msg := callErr(ctx, t, cs, "write_file", map[string]any{"sandbox": sb.ID, "path": path, "content": "stale\n", "expected_version": v1.Version}); !strings.Contains(msg, "precondition_failed") {
		t.Fatalf("stale write_file: %q, want precondition_failed", msg)
	}
	var read struct {
		Content, Version, Encoding string
	}
	call(ctx, t, cs, "read_file", map[string]any{"sandbox": sb.ID, "path": path}, &read)
	if read.Content != "two\n" || read.Version != v2.Version || read.Encoding != "utf-8" {
		t.Fatalf("read_file after a stale write: %+v, want two with version %s", read, v2.Version)
	}
	var v3 fileVersion
	call(ctx, t, cs, "edit_file", map[string]any{"sandbox": sb.ID, "path": path, "expected_version": v2.Version,
		"edits": []map[string]string{{"old": "two", "new": "three"}}}, &v3)
	if msg := callErr(ctx, t, cs, "edit_file", map[string]any{"sandbox": sb.ID, "path": path,
		"edits": []map[string]string{{"old": "absent", "new": "x"}}}); msg == "" {
		t.Fatal("edit_file of absent text gave no message")
	}
	res, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "cove://sandboxes/" + sb.ID + "/files" + path})
	if err != nil {
		t.Fatalf("read resource: %v", err)
	}
	if len(res.Contents) != 1 || res.Contents[0].Text != "three\n" {
		t.Fatalf("resource of %s: %+v, want three", path, res.Contents)
	}
	var files struct {
		Entries []struct{ Name, Version string } `json:"entries"`
	}
	call(ctx, t, cs, "list_files", map[string]any{"sandbox": sb.ID}, &files)
	if !slices.ContainsFunc(files.Entries, func(e struct{ Name, Version string }) bool {
		return e.Name == "notes.txt" && e.Version == v3.Version
	}) {
		t.Fatalf("list_files of the workdir: %+v, want notes.txt at %s", files.Entries, v3.Version)
	}

	// Network: a host is added to the policy.
	var net struct {
		Allow  []string `json:"allow"`
		Denied []any    `json:"denied"`
	}
	call(ctx, t, cs, "sandbox_network", map[string]any{"sandbox": sb.ID, "allow": []string{"example.test"}}, &net)
	if !slices.Contains(net.Allow, "example.test") || net.Denied == nil {
		t.Fatalf("sandbox_network after allow: %+v", net)
	}

	// Errors come back as tool errors with the API's message.
	if msg := callErr(ctx, t, cs, "run_command", map[string]any{"sandbox": "sbx_nosuchsandbox", "command": "true"}); !strings.Contains(msg, "not_found") {
		t.Fatalf("run_command in a missing sandbox: %q, want not_found", msg)
	}

	var st struct{ State string }
	call(ctx, t, cs, "sleep_sandbox", map[string]any{"sandbox": sb.ID}, &st)
	if st.State != "asleep" {
		t.Fatalf("sleep_sandbox: %s", st.State)
	}
	call(ctx, t, cs, "wake_sandbox", map[string]any{"sandbox": sb.ID}, &st)
	if st.State != "running" {
		t.Fatalf("wake_sandbox: %s", st.State)
	}
	call(ctx, t, cs, "read_file", map[string]any{"sandbox": sb.ID, "path": path}, &read)
	if read.Content != "three\n" {
		t.Fatalf("after sleep and wake: %q", read.Content)
	}
	// A snapshot and a fork of it, through the tools.
	var snap struct{ ID, Name, Digest string }
	call(ctx, t, cs, "snapshot_sandbox", map[string]any{"sandbox": sb.ID, "name": "mcp-snap"}, &snap)
	if !strings.HasPrefix(snap.ID, "snap_") || snap.Name != "mcp-snap" || !strings.HasPrefix(snap.Digest, "sha256:") {
		t.Fatalf("snapshot_sandbox: %+v", snap)
	}
	var forks struct {
		Sandboxes []struct{ ID, State string }
	}
	call(ctx, t, cs, "fork_sandbox", map[string]any{"sandbox": sb.ID, "count": 2}, &forks)
	if len(forks.Sandboxes) != 2 || forks.Sandboxes[0].State != "running" || forks.Sandboxes[0].ID == sb.ID {
		t.Fatalf("fork_sandbox: %+v", forks)
	}
	for _, f := range forks.Sandboxes {
		call(ctx, t, cs, "read_file", map[string]any{"sandbox": f.ID, "path": path}, &read)
		if read.Content != "three\n" {
			t.Fatalf("a fork's file: %q", read.Content)
		}
		call(ctx, t, cs, "terminate_sandbox", map[string]any{"sandbox": f.ID}, &st)
	}
	call(ctx, t, cs, "terminate_sandbox", map[string]any{"sandbox": sb.ID}, &st)
	if st.State != "terminated" && st.State != "terminating" {
		t.Fatalf("terminate_sandbox: %s", st.State)
	}
}
