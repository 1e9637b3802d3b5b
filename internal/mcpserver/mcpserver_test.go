package mcpserver

import (
	"encoding/base64"
	"encoding/json"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cove-dev/cove/api"
	cove "github.com/cove-dev/cove/sdk/go"
)

// session serves f over HTTP, builds the MCP server on a Go SDK client of
// it and connects an MCP client to that server in memory.
func session(t *testing.T, f *fakeAPI) *mcp.ClientSession {
	t.Helper()
	srv := httptest.NewServer(f.handler())
	t.Cleanup(srv.Close)
	st, ct := mcp.NewInMemoryTransports()
	ss, err := New(cove.New(srv.URL, "key"), "test").Connect(t.Context(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "0"}, nil).Connect(t.Context(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cs.Close()
		ss.Wait()
	})
	return cs
}

// result is a tool call's answer: the error text of a tool error, or the
// structured output as JSON.
type result struct {
	err string
	out json.RawMessage
}

func call(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any) result {
	t.Helper()
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		// Bad arguments may come back as a protocol error; a model reads
		// it all the same.
		return result{err: err.Error()}
	}
	if res.IsError {
		var text []string
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				text = append(text, tc.Text)
			}
		}
		return result{err: strings.Join(text, "\n")}
	}
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	return result{out: b}
}

// as decodes a tool's output.
func as[T any](t *testing.T, r result) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(r.out, &v); err != nil {
		t.Fatalf("decode %s: %v", r.out, err)
	}
	return v
}

// toolCase is one call of a tool: setup prepares the fake, wantErr is a
// part of the tool error expected ("" for success), check looks at the
// output and the fake afterwards.
type toolCase struct {
	name    string
	args    map[string]any
	setup   func(f *fakeAPI)
	wantErr string
	check   func(t *testing.T, f *fakeAPI, r result)
}

func runCases(t *testing.T, tool string, cases []toolCase) {
	t.Helper()
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake()
			if tt.setup != nil {
				tt.setup(f)
			}
			cs := session(t, f)
			r := call(t, cs, tool, tt.args)
			switch {
			case tt.wantErr == "" && r.err != "":
				t.Fatalf("%s: tool error %q", tool, r.err)
			case tt.wantErr != "" && !strings.Contains(r.err, tt.wantErr):
				t.Fatalf("%s = %s %q; want a tool error with %q", tool, r.out, r.err, tt.wantErr)
			}
			if tt.check != nil {
				f.mu.Lock()
				defer f.mu.Unlock()
				tt.check(t, f, r)
			}
		})
	}
}

// failing makes the fake's route answer an API error.
func failing(route string, code api.Code, msg string) func(f *fakeAPI) {
	return func(f *fakeAPI) { f.fail[route] = &api.Error{Code: code, Message: msg} }
}

func exitRec(seq int64, code int) api.OutputRecord {
	return api.OutputRecord{Seq: seq, Type: "exit", ExitCode: &code}
}

func TestCreateSandbox(t *testing.T) {
	runCases(t, "create_sandbox", []toolCase{
		{name: "with resources, network and idle timeout", args: map[string]any{
			"name": "box2", "cpus": 2, "memory_mib": 2048, "network_allow": []string{"pypi.org"}, "idle_timeout_s": 60,
			"env": map[string]string{"A": "1"}, "labels": map[string]string{"k": "v"},
		}, check: func(t *testing.T, f *fakeAPI, r result) {
			sb := as[Sandbox](t, r)
			if sb.ID != "sb2" || sb.Name != "box2" || sb.State != "running" || sb.CPUs != 2 || sb.Labels["k"] != "v" {
				t.Errorf("sandbox %+v", sb)
			}
			if f.createQ != "wait=running" {
				t.Errorf("create query %q; want wait=running", f.createQ)
			}
			req := f.create
			if req.Resources == nil || *req.Resources.CPUs != 2 || *req.Resources.MemoryMiB != 2048 || req.Resources.DiskMiB != nil {
				t.Errorf("resources %+v; want cpus and memory only", req.Resources)
			}
			if req.Network == nil || !slices.Equal(req.Network.Allow, []string{"pypi.org"}) || *req.IdleTimeoutS != 60 || req.Env["A"] != "1" {
				t.Errorf("request %+v", req)
			}
		}},
		{name: "defaults leave resources, network and idle unset", args: map[string]any{}, check: func(t *testing.T, f *fakeAPI, r result) {
			if f.create.Resources != nil || f.create.Network != nil || f.create.IdleTimeoutS != nil {
				t.Errorf("request %+v; want no resources, network or idle timeout", f.create)
			}
		}},
		{name: "bad input", args: map[string]any{"cpus": "many"}, wantErr: "cpus", check: noCalls},
		{name: "API error", args: map[string]any{}, setup: failing("create", api.CodeResourceExhausted, "no room for 2 CPUs"),
			wantErr: "resource_exhausted: no room for 2 CPUs"},
	})
}

// noCalls: input the tool refuses reaches no API.
func noCalls(t *testing.T, f *fakeAPI, r result) {
	if len(f.calls) != 0 {
		t.Errorf("API calls %v; want none", f.calls)
	}
}

func TestListSandboxes(t *testing.T) {
	more := func(f *fakeAPI) {
		for _, id := range []string{"sb2", "sb3"} {
			f.sandboxes = append(f.sandboxes, api.Sandbox{ID: id, State: api.StateAsleep})
		}
	}
	runCases(t, "list_sandboxes", []toolCase{
		{name: "all, default limit", args: map[string]any{}, setup: more, check: func(t *testing.T, f *fakeAPI, r result) {
			out := as[ListSandboxesOutput](t, r)
			if f.listQ != "limit=50" || len(out.Sandboxes) != 3 || out.More || out.Sandboxes[0].ID != "sb3" {
				t.Errorf("query %q, output %+v", f.listQ, out)
			}
		}},
		{name: "by state, limited", args: map[string]any{"state": "asleep", "limit": 1}, setup: more, check: func(t *testing.T, f *fakeAPI, r result) {
			out := as[ListSandboxesOutput](t, r)
			if f.listQ != "limit=1&state=asleep" || len(out.Sandboxes) != 1 || !out.More || out.Sandboxes[0].State != "asleep" {
				t.Errorf("query %q, output %+v", f.listQ, out)
			}
		}},
		{name: "none is an empty list", args: map[string]any{"state": "failed"}, check: func(t *testing.T, f *fakeAPI, r result) {
			if !strings.Contains(string(r.out), `"sandboxes":[]`) {
				t.Errorf("output %s; want an empty list, not null", r.out)
			}
		}},
		{name: "bad input", args: map[string]any{"limit": "ten"}, wantErr: "limit", check: noCalls},
		{name: "API error", args: map[string]any{}, setup: failing("list", api.CodeUnauthenticated, "key revoked"), wantErr: "unauthenticated: key revoked"},
	})
}

func TestRunCommand(t *testing.T) {
	script := func(line string, recs ...api.OutputRecord) func(f *fakeAPI) {
		return func(f *fakeAPI) { f.scripts[line] = recs }
	}
	chunk := strings.Repeat("x", 40<<10)
	runCases(t, "run_command", []toolCase{
		{name: "ends in time", args: map[string]any{"sandbox": "box", "command": "echo hi; echo oops >&2", "timeout_s": 9, "user": "root", "cwd": "/tmp", "stdin": true},
			setup: script("echo hi; echo oops >&2",
				api.OutputRecord{Seq: 1, Stream: "stdout", Data: []byte("hi\n")},
				api.OutputRecord{Seq: 2, Stream: "stderr", Data: []byte("oops\n")}, exitRec(3, 0)),
			check: func(t *testing.T, f *fakeAPI, r result) {
				out := as[CommandOutput](t, r)
				zero := 0
				want := CommandOutput{CommandID: "cmd1", Done: true, ExitCode: &zero, Stdout: "hi\n", Stderr: "oops\n", NextSeq: 3}
				if diff := cmp.Diff(want, out); diff != "" {
					t.Errorf("output (-want +got):\n%s", diff)
				}
				if e := f.exec; *e.TimeoutS != 9 || e.User != "root" || e.Cwd != "/tmp" || !e.Stdin {
					t.Errorf("exec request %+v", e)
				}
				if !slices.Equal(f.outputQ, []string{"after=0&follow=true"}) {
					t.Errorf("output queries %v", f.outputQ)
				}
			}},
		{name: "output past 64 KiB is left for command_output", args: map[string]any{"sandbox": "sb1", "command": "big"},
			setup: script("big",
				api.OutputRecord{Seq: 1, Stream: "stdout", Data: []byte(chunk)},
				api.OutputRecord{Seq: 2, Stream: "stdout", Data: []byte(chunk)}, exitRec(3, 0)),
			check: func(t *testing.T, f *fakeAPI, r result) {
				out := as[CommandOutput](t, r)
				if out.Done || !out.More || out.NextSeq != 1 || len(out.Stdout) != len(chunk) {
					t.Errorf("done %v more %v next %d stdout %d bytes; want the first chunk, more from seq 1", out.Done, out.More, out.NextSeq, len(out.Stdout))
				}
			}},
		{name: "bytes that are not UTF-8 are marked", args: map[string]any{"sandbox": "sb1", "command": "bin"},
			setup: script("bin", api.OutputRecord{Seq: 1, Stream: "stdout", Data: []byte("a\xffb")}, exitRec(2, 1)),
			check: func(t *testing.T, f *fakeAPI, r result) {
				if out := as[CommandOutput](t, r); out.Stdout != "a\uFFFDb" || *out.ExitCode != 1 {
					t.Errorf("output %+v", out)
				}
			}},
		{name: "a broken stream is resumed later, not an error", args: map[string]any{"sandbox": "sb1", "command": "cut"},
			setup: script("cut", api.OutputRecord{Seq: 1, Stream: "stdout", Data: []byte("part")}),
			check: func(t *testing.T, f *fakeAPI, r result) {
				if out := as[CommandOutput](t, r); out.Done || out.NextSeq != 1 || out.Stdout != "part" {
					t.Errorf("output %+v", out)
				}
			}},
		{name: "still running after wait_s", args: map[string]any{"sandbox": "sb1", "command": "sleep 1000", "wait_s": 1},
			setup: func(f *fakeAPI) {
				f.scripts["sleep 1000"] = []api.OutputRecord{{Seq: 1, Stream: "stdout", Data: []byte("started\n")}}
				f.hang["sleep 1000"] = true
			},
			check: func(t *testing.T, f *fakeAPI, r result) {
				if out := as[CommandOutput](t, r); out.Done || out.CommandID != "cmd1" || out.NextSeq != 1 || out.Stdout != "started\n" {
					t.Errorf("output %+v", out)
				}
			}},
		{name: "empty command", args: map[string]any{"sandbox": "sb1", "command": "  "}, wantErr: "command is empty", check: noCalls},
		{name: "no sandbox", args: map[string]any{"command": "ls"}, wantErr: "sandbox", check: noCalls},
		{name: "API error on exec", args: map[string]any{"sandbox": "nope", "command": "ls"}, wantErr: "not_found: sandbox nope not found"},
		{name: "API error on output", args: map[string]any{"sandbox": "sb1", "command": "ls"},
			setup: failing("output", api.CodeUnavailable, "the node is gone"), wantErr: "unavailable: the node is gone"},
	})
}

func TestCommandOutput(t *testing.T) {
	started := func(f *fakeAPI) {
		f.commands["cmd7"] = "make"
		f.scripts["make"] = []api.OutputRecord{
			{Seq: 1, Stream: "stdout", Data: []byte("one\n")},
			{Seq: 2, Stream: "stdout", Data: []byte("two\n")},
			{Seq: 3, Stream: "stderr", Data: []byte("three\n")}, exitRec(4, 2)}
	}
	runCases(t, "command_output", []toolCase{
		{name: "from after_seq", args: map[string]any{"sandbox": "sb1", "command_id": "cmd7", "after_seq": 1}, setup: started,
			check: func(t *testing.T, f *fakeAPI, r result) {
				out := as[CommandOutput](t, r)
				if out.Stdout != "two\n" || out.Stderr != "three\n" || !out.Done || *out.ExitCode != 2 || out.NextSeq != 4 {
					t.Errorf("output %+v", out)
				}
				if !slices.Equal(f.outputQ, []string{"after=1&follow=true"}) {
					t.Errorf("output queries %v", f.outputQ)
				}
			}},
		{name: "negative after_seq", args: map[string]any{"sandbox": "sb1", "command_id": "cmd7", "after_seq": -1}, setup: started,
			wantErr: "after_seq must not be negative", check: noCalls},
		{name: "API error", args: map[string]any{"sandbox": "sb1", "command_id": "cmd9"}, wantErr: "not_found: command cmd9 not found"},
	})
}

func TestSendInput(t *testing.T) {
	runCases(t, "send_input", []toolCase{
		{name: "input and close", args: map[string]any{"sandbox": "sb1", "command_id": "cmd1", "input": "yes\n", "close": true},
			check: func(t *testing.T, f *fakeAPI, r result) {
				if out := as[SendInputOutput](t, r); out.Sent != 4 || !out.Closed || f.stdin.String() != "yes\n" || !f.stdinEOF {
					t.Errorf("output %+v, stdin %q eof %v", out, f.stdin.String(), f.stdinEOF)
				}
			}},
		{name: "no input", args: map[string]any{"sandbox": "sb1", "command_id": "cmd1"}, wantErr: "input", check: noCalls},
		{name: "API error", args: map[string]any{"sandbox": "sb1", "command_id": "cmd1", "input": "x"},
			setup: failing("stdin", api.CodeConflict, "stdin is closed"), wantErr: "conflict: stdin is closed"},
	})
}

func TestReadFile(t *testing.T) {
	runCases(t, "read_file", []toolCase{
		{name: "text", args: map[string]any{"sandbox": "sb1", "path": "/workspace/a.txt"}, check: func(t *testing.T, f *fakeAPI, r result) {
			want := FileContent{Path: "/workspace/a.txt", Version: "v1", Size: 6, Encoding: "utf-8", Content: "hello\n"}
			if diff := cmp.Diff(want, as[FileContent](t, r)); diff != "" {
				t.Errorf("output (-want +got):\n%s", diff)
			}
		}},
		{name: "binary comes in base64", args: map[string]any{"sandbox": "sb1", "path": "/workspace/b"},
			setup: func(f *fakeAPI) { f.files["/workspace/b"] = &fakeFile{content: []byte{0, 0xff, 1}, version: 3} },
			check: func(t *testing.T, f *fakeAPI, r result) {
				if out := as[FileContent](t, r); out.Encoding != "base64" || out.Content != base64.StdEncoding.EncodeToString([]byte{0, 0xff, 1}) || out.Version != "v3" {
					t.Errorf("output %+v", out)
				}
			}},
		{name: "too big for one call", args: map[string]any{"sandbox": "sb1", "path": "/workspace/big"},
			setup:   func(f *fakeAPI) { f.files["/workspace/big"] = &fakeFile{content: make([]byte, maxFileBytes+1)} },
			wantErr: "more than the 1048576 one call reads"},
		{name: "no path", args: map[string]any{"sandbox": "sb1"}, wantErr: "path", check: noCalls},
		{name: "API error", args: map[string]any{"sandbox": "sb1", "path": "/nope"}, wantErr: "not_found: no such file: /nope"},
		{name: "damaged download", args: map[string]any{"sandbox": "sb1", "path": "/workspace/a.txt"},
			setup: func(f *fakeAPI) { f.badDigest = true }, wantErr: cove.ErrDigestMismatch.Error()},
	})
}

func TestWriteFile(t *testing.T) {
	content := func(p, want string) func(t *testing.T, f *fakeAPI, r result) {
		return func(t *testing.T, f *fakeAPI, r result) {
			if ff := f.files[p]; ff == nil || string(ff.content) != want {
				t.Errorf("%s holds %v; want %q", p, ff, want)
			}
		}
	}
	runCases(t, "write_file", []toolCase{
		{name: "new file with mode", args: map[string]any{"sandbox": "sb1", "path": "/workspace/run.sh", "content": "#!/bin/sh\n", "mode": "0755"},
			check: func(t *testing.T, f *fakeAPI, r result) {
				if out := as[FileVersion](t, r); out.Version != "v1" || out.Size != 10 || f.writeMode != "0755" {
					t.Errorf("output %+v, mode %q", out, f.writeMode)
				}
				content("/workspace/run.sh", "#!/bin/sh\n")(t, f, r)
			}},
		{name: "base64", args: map[string]any{"sandbox": "sb1", "path": "/workspace/b", "content": "AP8B", "encoding": "base64"},
			check: content("/workspace/b", "\x00\xff\x01")},
		{name: "at the version read", args: map[string]any{"sandbox": "sb1", "path": "/workspace/a.txt", "content": "new", "expected_version": "v1"},
			check: func(t *testing.T, f *fakeAPI, r result) {
				if out := as[FileVersion](t, r); out.Version != "v2" || f.headers["write"].Get("If-Match") != `"v1"` {
					t.Errorf("output %+v, If-Match %q", out, f.headers["write"].Get("If-Match"))
				}
			}},
		{name: "changed since read", args: map[string]any{"sandbox": "sb1", "path": "/workspace/a.txt", "content": "new", "expected_version": "v0"},
			wantErr: "precondition_failed: the file is not at version v0 (the file changed since you read it: read_file again",
			check:   content("/workspace/a.txt", "hello\n")},
		{name: "none: only if new", args: map[string]any{"sandbox": "sb1", "path": "/workspace/a.txt", "content": "new", "expected_version": "none"},
			wantErr: "precondition_failed: the file exists", check: content("/workspace/a.txt", "hello\n")},
		{name: "bad encoding", args: map[string]any{"sandbox": "sb1", "path": "/p", "content": "x", "encoding": "latin1"},
			wantErr: `encoding "latin1": want utf-8 or base64`, check: noCalls},
		{name: "bad base64", args: map[string]any{"sandbox": "sb1", "path": "/p", "content": "!!", "encoding": "base64"},
			wantErr: "content is not base64", check: noCalls},
		{name: "API error", args: map[string]any{"sandbox": "sb1", "path": "/p", "content": "x"},
			setup: failing("write", api.CodeInsufficientStorage, "the sandbox's disk is full"), wantErr: "insufficient_storage: the sandbox's disk is full"},
	})
}

func TestEditFile(t *testing.T) {
	edits := func(pairs ...string) []map[string]string {
		var out []map[string]string
		for i := 0; i < len(pairs); i += 2 {
			out = append(out, map[string]string{"old": pairs[i], "new": pairs[i+1]})
		}
		return out
	}
	runCases(t, "edit_file", []toolCase{
		{name: "edits in turn", args: map[string]any{"sandbox": "sb1", "path": "/workspace/a.txt", "edits": edits("hello", "hi", "hi\n", "hi there\n"), "expected_version": "v1"},
			check: func(t *testing.T, f *fakeAPI, r result) {
				if out := as[FileVersion](t, r); out.Version != "v2" || string(f.files["/workspace/a.txt"].content) != "hi there\n" {
					t.Errorf("output %+v, content %q", out, f.files["/workspace/a.txt"].content)
				}
			}},
		{name: "no edits", args: map[string]any{"sandbox": "sb1", "path": "/workspace/a.txt", "edits": edits()}, wantErr: "edits", check: noCalls},
		{name: "old text not once", args: map[string]any{"sandbox": "sb1", "path": "/workspace/a.txt", "edits": edits("l", "L")},
			wantErr: "conflict: edit 0: old text occurs 2 times"},
		{name: "stale version", args: map[string]any{"sandbox": "sb1", "path": "/workspace/a.txt", "edits": edits("hello", "hi"), "expected_version": "v9"},
			wantErr: "read_file again"},
	})
}

func TestListFiles(t *testing.T) {
	runCases(t, "list_files", []toolCase{
		{name: "the workdir by default", args: map[string]any{"sandbox": "box"}, check: func(t *testing.T, f *fakeAPI, r result) {
			out := as[ListFilesOutput](t, r)
			if len(out.Entries) != 1 || out.Entries[0].Path != "/workspace/a.txt" || out.More {
				t.Errorf("output %+v", out)
			}
			if !slices.Equal(f.calls, []string{"get", "ls"}) || f.lsQ != "depth=1&limit=500&path=%2Fworkspace" {
				t.Errorf("calls %v, query %q", f.calls, f.lsQ)
			}
		}},
		{name: "a path, deeper", args: map[string]any{"sandbox": "sb1", "path": "/etc", "depth": 3}, check: func(t *testing.T, f *fakeAPI, r result) {
			if out := as[ListFilesOutput](t, r); out.Entries == nil || len(out.Entries) != 0 || f.lsQ != "depth=3&limit=500&path=%2Fetc" {
				t.Errorf("output %+v, query %q", out, f.lsQ)
			}
		}},
		{name: "bad input", args: map[string]any{"sandbox": "sb1", "depth": "deep"}, wantErr: "depth", check: noCalls},
		{name: "API error", args: map[string]any{"sandbox": "sb1", "path": "/root"},
			setup: failing("ls", api.CodePermissionDenied, "not yours"), wantErr: "permission_denied: not yours"},
	})
}

func TestSandboxNetwork(t *testing.T) {
	observed := func(f *fakeAPI) {
		f.policy = []string{"pypi.org"}
		f.observed = []api.NetworkObservation{
			{Destination: "pypi.org", Port: 443, Decision: "allowed"},
			{Destination: "evil.example", Port: 443, Decision: "denied"}}
	}
	runCases(t, "sandbox_network", []toolCase{
		{name: "shows what was denied", args: map[string]any{"sandbox": "sb1"}, setup: observed, check: func(t *testing.T, f *fakeAPI, r result) {
			out := as[SandboxNetworkOutput](t, r)
			if len(out.Denied) != 1 || out.Denied[0].Destination != "evil.example" || len(out.Observations) != 2 || f.update != nil {
				t.Errorf("output %+v, update %+v", out, f.update)
			}
		}},
		{name: "allow adds what is new", args: map[string]any{"sandbox": "sb1", "allow": []string{"pypi.org", "github.com"}}, setup: observed,
			check: func(t *testing.T, f *fakeAPI, r result) {
				want := []string{"pypi.org", "github.com"}
				if out := as[SandboxNetworkOutput](t, r); !slices.Equal(out.Allow, want) || !slices.Equal(f.update.Network.Allow, want) {
					t.Errorf("allow %v, update %+v; want %v", out.Allow, f.update.Network, want)
				}
			}},
		{name: "nothing observed is empty lists", args: map[string]any{"sandbox": "sb1"}, check: func(t *testing.T, f *fakeAPI, r result) {
			if !strings.Contains(string(r.out), `"denied":[]`) || !strings.Contains(string(r.out), `"allow":[]`) {
				t.Errorf("output %s; want empty lists, not null", r.out)
			}
		}},
		{name: "bad input", args: map[string]any{"sandbox": "sb1", "allow": "github.com"}, wantErr: "allow", check: noCalls},
		{name: "API error on update", args: map[string]any{"sandbox": "sb1", "allow": []string{"10.0.0.1"}},
			setup: failing("update", api.CodeInvalidArgument, "private address"), wantErr: "invalid_argument: private address"},
		{name: "API error", args: map[string]any{"sandbox": "gone"}, wantErr: "not_found: sandbox gone not found"},
	})
}

func TestSleepWakeTerminate(t *testing.T) {
	state := func(want string, waits ...string) func(t *testing.T, f *fakeAPI, r result) {
		return func(t *testing.T, f *fakeAPI, r result) {
			if sb := as[Sandbox](t, r); sb.State != want || sb.ID != "sb1" {
				t.Errorf("sandbox %+v; want %s", sb, want)
			}
			if !slices.Equal(f.waits, waits) {
				t.Errorf("waited for %v; want %v", f.waits, waits)
			}
		}
	}
	for _, tc := range []struct {
		tool  string
		cases []toolCase
	}{
		{"sleep_sandbox", []toolCase{
			{name: "asleep", args: map[string]any{"sandbox": "box"}, check: state("asleep", "asleep")},
			{name: "no sandbox", args: map[string]any{}, wantErr: "sandbox", check: noCalls},
			{name: "API error", args: map[string]any{"sandbox": "sb1"}, setup: failing("sleep", api.CodeConflict, "sandbox is creating"), wantErr: "conflict: sandbox is creating"},
			{name: "API error while waiting", args: map[string]any{"sandbox": "sb1"}, setup: failing("wait", api.CodeUnavailable, "save failed"), wantErr: "unavailable: save failed"},
		}},
		{"wake_sandbox", []toolCase{
			{name: "running", args: map[string]any{"sandbox": "sb1"}, setup: func(f *fakeAPI) { f.sandboxes[0].State = api.StateAsleep }, check: state("running", "running")},
			{name: "API error", args: map[string]any{"sandbox": "sb1"}, setup: failing("wake", api.CodeResourceExhausted, "no room"), wantErr: "resource_exhausted: no room"},
		}},
		{"snapshot_sandbox", []toolCase{
			{name: "made", args: map[string]any{"sandbox": "sb1", "name": "ready"}, check: func(t *testing.T, f *fakeAPI, res result) {
				var s Snapshot
				if err := json.Unmarshal(res.out, &s); err != nil {
					t.Fatal(err)
				}
				if s.ID != "snap_1" || s.Name != "ready" || s.SandboxID != "sb1" || s.Digest != "sha256:00" {
					t.Errorf("snapshot %+v", s)
				}
			}},
			{name: "no name", args: map[string]any{"sandbox": "sb1"}, wantErr: "name", check: noCalls},
			{name: "API error", args: map[string]any{"sandbox": "other", "name": "x"}, wantErr: "not_found: sandbox other not found"},
		}},
		{"fork_sandbox", []toolCase{
			{name: "forked", args: map[string]any{"sandbox": "sb1", "count": 2, "names": []string{"a", "b"}}, check: func(t *testing.T, f *fakeAPI, res result) {
				var out Forks
				if err := json.Unmarshal(res.out, &out); err != nil {
					t.Fatal(err)
				}
				if len(out.Sandboxes) != 2 || out.Sandboxes[0].ID != "fk1" || out.Sandboxes[1].Name != "b" || out.Sandboxes[0].State != "running" {
					t.Errorf("forks %+v", out)
				}
			}},
			{name: "past the limit", args: map[string]any{"sandbox": "sb1", "count": 9}, wantErr: "invalid_argument: count 9: want 1 to 3"},
			{name: "no sandbox", args: map[string]any{"count": 1}, wantErr: "sandbox", check: noCalls},
		}},
		{"terminate_sandbox", []toolCase{
			{name: "terminated", args: map[string]any{"sandbox": "sb1"}, check: state("terminated")},
			{name: "API error", args: map[string]any{"sandbox": "other"}, wantErr: "not_found: sandbox other not found"},
		}},
	} {
		t.Run(tc.tool, func(t *testing.T) { runCases(t, tc.tool, tc.cases) })
	}
}

// TestFileResource: a file reads as a resource; a missing one, or a URI
// that names none, is the protocol's resource-not-found.
func TestFileResource(t *testing.T) {
	f := newFake()
	f.files["/workspace/b"] = &fakeFile{content: []byte{0, 0xff}}
	cs := session(t, f)
	for _, tt := range []struct {
		uri, text, mime string
		blob            []byte
		wantErr         string
	}{
		{uri: "cove://sandboxes/sb1/files/workspace/a.txt", text: "hello\n", mime: "text/plain; charset=utf-8"},
		{uri: "cove://sandboxes/box/files/workspace/b", blob: []byte{0, 0xff}, mime: "application/octet-stream"},
		{uri: "cove://sandboxes/sb1/files/nope", wantErr: "not found"},
		{uri: "cove://sandboxes/sb1/other", wantErr: "not found"},
	} {
		res, err := cs.ReadResource(t.Context(), &mcp.ReadResourceParams{URI: tt.uri})
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(strings.ToLower(err.Error()), tt.wantErr) {
				t.Errorf("%s: %v; want %q", tt.uri, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tt.uri, err)
			continue
		}
		c := res.Contents[0]
		if c.Text != tt.text || string(c.Blob) != string(tt.blob) || c.MIMEType != tt.mime {
			t.Errorf("%s: %+v", tt.uri, c)
		}
	}
}

// TestTools: every tool is offered, and the read-only ones say so.
func TestTools(t *testing.T) {
	cs := session(t, newFake())
	res, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names, readOnly []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
		if tool.Annotations != nil && tool.Annotations.ReadOnlyHint {
			readOnly = append(readOnly, tool.Name)
		}
	}
	slices.Sort(names)
	slices.Sort(readOnly)
	want := []string{"command_output", "create_sandbox", "create_volume", "delete_volume", "edit_file", "fork_sandbox", "list_files", "list_sandboxes",
		"list_volumes", "read_file", "run_command", "sandbox_network", "send_input", "sleep_sandbox", "snapshot_sandbox", "terminate_sandbox",
		"wake_sandbox", "write_file"}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("tools (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"command_output", "list_files", "list_sandboxes", "list_volumes", "read_file"}, readOnly); diff != "" {
		t.Errorf("read-only tools (-want +got):\n%s", diff)
	}
}
