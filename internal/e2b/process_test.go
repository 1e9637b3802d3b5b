package e2b

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2b/envd/process"
	"github.com/cove-dev/cove/internal/e2b/envd/process/processconnect"
	"github.com/cove-dev/cove/internal/node"
)

// processClient is a Connect client of the sandbox listener over JSON, as
// E2B's SDKs speak it, for sandbox id with token.
func (h *harness) processClient(id, token, user string) processconnect.ProcessClient {
	hdr := http.Header{"E2b-Sandbox-Id": {id}, "X-Access-Token": {token}}
	if user != "" {
		hdr.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":")))
	}
	return processconnect.NewProcessClient(&http.Client{Transport: withHeaders{hdr}}, h.side.URL, connect.WithProtoJSON())
}

// withHeaders adds E2B's sandbox headers to every request, as the SDKs'
// fetch does.
type withHeaders struct{ h http.Header }

func (w withHeaders) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range w.h {
		r.Header[k] = v
	}
	return http.DefaultTransport.RoundTrip(r)
}

func pidSel(pid uint32) *process.ProcessSelector {
	return &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: pid}}
}

// TestProcessCalls: pids are the sandbox's own, the commands' (its
// agent's word, api.Command.PID); list shows the running ones; input,
// stdin's close and signals reach the running command a pid names, never
// another sandbox's of the same pid; a token opens only its own
// sandbox's processes.
func TestProcessCalls(t *testing.T) {
	h := newHarness(t)
	sb := h.create("key-a", map[string]any{"templateID": "base"})
	other := h.create("key-b", map[string]any{"templateID": "base"})
	for _, argv := range [][]string{{"/bin/bash", "-l", "-c", "sleep 1"}, {"/bin/bash", "-l", "-c", "cat"}} {
		h.cmds.Exec(t.Context(), "a", sb.SandboxID, false, api.CreateCommandRequest{Argv: argv})
	}
	h.cmds.cmds[0].State = api.CommandExited
	// Another team's sandbox, whose pids are the same numbers and more.
	for range 3 {
		h.cmds.Exec(t.Context(), "b", other.SandboxID, false, api.CreateCommandRequest{Argv: []string{"cat"}})
	}
	c := h.processClient(sb.SandboxID, sb.EnvdAccessToken, "")
	l, err := c.List(t.Context(), connect.NewRequest(&process.ListRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Msg.Processes) != 1 || l.Msg.Processes[0].Pid != firstPID+1 || l.Msg.Processes[0].Config.Cmd != "/bin/bash" ||
		strings.Join(l.Msg.Processes[0].Config.Args, " ") != "-l -c cat" {
		t.Fatalf("list: %v", l.Msg.Processes)
	}
	if _, err := c.SendInput(t.Context(), connect.NewRequest(&process.SendInputRequest{
		Process: pidSel(firstPID + 1), Input: &process.ProcessInput{Input: &process.ProcessInput_Stdin{Stdin: []byte("hi")}},
	})); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CloseStdin(t.Context(), connect.NewRequest(&process.CloseStdinRequest{Process: pidSel(firstPID + 1)})); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(h.cmds.stdin, " "); got != `cmd_2:"hi":false cmd_2:"":true` {
		t.Errorf("stdin reached %s", got)
	}
	if _, err := c.SendSignal(t.Context(), connect.NewRequest(&process.SendSignalRequest{Process: pidSel(firstPID + 1), Signal: process.Signal_SIGNAL_SIGKILL})); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(h.cmds.signals, " "); got != "cmd_2:KILL" {
		t.Errorf("signals: %s", got)
	}
	// An ended process, one that never was, and one only the other
	// sandbox has are not found; the other sandbox's processes are
	// untouched.
	for _, pid := range []uint32{firstPID, firstPID + 1, firstPID + 2, firstPID + 7, 1, 0} {
		_, err := c.SendSignal(t.Context(), connect.NewRequest(&process.SendSignalRequest{Process: pidSel(pid), Signal: process.Signal_SIGNAL_SIGKILL}))
		if connect.CodeOf(err) != connect.CodeNotFound {
			t.Errorf("signal pid %d: %v; want not_found", pid, err)
		}
		cs, err := c.Connect(t.Context(), connect.NewRequest(&process.ConnectRequest{Process: pidSel(pid)}))
		if err != nil {
			t.Fatal(err)
		}
		if cs.Receive() || connect.CodeOf(cs.Err()) != connect.CodeNotFound {
			t.Errorf("connect pid %d: %v %v; want not_found", pid, cs.Msg(), cs.Err())
		}
		cs.Close()
	}
	if got := strings.Join(h.cmds.signals, " "); got != "cmd_2:KILL" {
		t.Errorf("signals after: %s", got)
	}
	ol, err := h.processClient(other.SandboxID, other.EnvdAccessToken, "").List(t.Context(), connect.NewRequest(&process.ListRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	var pids []uint32
	for _, p := range ol.Msg.Processes {
		pids = append(pids, p.Pid)
	}
	if !slices.Equal(pids, []uint32{firstPID, firstPID + 1, firstPID + 2}) {
		t.Errorf("the other sandbox lists pids %v", pids)
	}
	// A new process's start event carries its own pid: the sandbox's
	// third command.
	st, err := c.Start(t.Context(), connect.NewRequest(&process.StartRequest{Process: &process.ProcessConfig{Cmd: "cat"}}))
	if err != nil {
		t.Fatal(err)
	}
	if !st.Receive() || st.Msg().GetEvent().GetStart().GetPid() != firstPID+2 {
		t.Errorf("start event %v (%v); want pid %d", st.Msg(), st.Err(), firstPID+2)
	}
	st.Close()
	// Another sandbox's token, or none, opens nothing of this one.
	for _, tok := range []string{other.EnvdAccessToken, ""} {
		_, err := h.processClient(sb.SandboxID, tok, "").List(t.Context(), connect.NewRequest(&process.ListRequest{}))
		if connect.CodeOf(err) != connect.CodeUnauthenticated {
			t.Errorf("list with token %q: %v; want unauthenticated", tok, err)
		}
	}
	st, err = h.processClient(sb.SandboxID, sb.EnvdAccessToken, "nobody").Start(t.Context(), connect.NewRequest(&process.StartRequest{
		Process: &process.ProcessConfig{Cmd: "id"},
	}))
	if err != nil {
		t.Fatal(err)
	}
	if st.Receive() || connect.CodeOf(st.Err()) != connect.CodeInvalidArgument {
		t.Errorf("a start as an unknown user: %v; want invalid_argument", st.Err())
	}
	st.Close()
	if len(h.cmds.execUser) != 6 {
		t.Errorf("a start as an unknown user ran a command: %v", h.cmds.execUser)
	}
}

func TestUserOf(t *testing.T) {
	for _, tc := range []struct {
		header, want string
		ok           bool
	}{
		{"", "user", true},
		{"Basic " + base64.StdEncoding.EncodeToString([]byte("user:")), "user", true},
		{"Basic " + base64.StdEncoding.EncodeToString([]byte("root:")), "root", true},
		{"basic " + base64.StdEncoding.EncodeToString([]byte(":")), "user", true},
		{"Basic " + base64.StdEncoding.EncodeToString([]byte("admin:")), "", false},
		{"Basic !!", "", false},
	} {
		h := http.Header{}
		if tc.header != "" {
			h.Set("Authorization", tc.header)
		}
		got, err := userOf(h)
		if got != tc.want || (err == nil) != tc.ok {
			t.Errorf("%q: %q, %v; want %q (ok %v)", tc.header, got, err, tc.want, tc.ok)
		}
	}
}

func TestEndEvent(t *testing.T) {
	for _, tc := range []struct {
		exit   node.Exit
		status string
		exited bool
		err    bool
	}{
		{node.Exit{ExitCode: 0}, "exit status 0", true, false},
		{node.Exit{ExitCode: 3}, "exit status 3", true, true},
		{node.Exit{ExitCode: -1, Signal: "KILL"}, "signal: killed", false, false},
		{node.Exit{ExitCode: -1, Signal: "TERM"}, "signal: terminated", false, false},
	} {
		e := endEvent(tc.exit)
		if e.Status != tc.status || e.Exited != tc.exited || (e.Error != nil) != tc.err || e.ExitCode != int32(tc.exit.ExitCode) {
			t.Errorf("%+v: %+v", tc.exit, e)
		}
	}
}

// TestStartCwd: a process starts in its user's home unless cwd says
// otherwise (relative to that home), whatever the sandbox's own working
// directory is.
func TestStartCwd(t *testing.T) {
	h := newHarness(t)
	sb := h.create("key-a", map[string]any{"templateID": "base"})
	for _, tc := range []struct {
		user string
		cwd  *string
		want string
	}{
		{"", nil, "/home/user"},
		{"root", nil, "/root"},
		{"", proto.String("/tmp"), "/tmp"},
		{"", proto.String("work/dir"), "/home/user/work/dir"},
	} {
		n := len(h.cmds.cmds)
		st, err := h.processClient(sb.SandboxID, sb.EnvdAccessToken, tc.user).Start(t.Context(), connect.NewRequest(&process.StartRequest{
			Process: &process.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-l", "-c", "pwd"}, Cwd: tc.cwd},
		}))
		if err != nil {
			t.Fatal(err)
		}
		for st.Receive() {
		}
		st.Close()
		if len(h.cmds.cmds) != n+1 || h.cmds.cmds[n].Cwd != tc.want {
			t.Errorf("user %q cwd %v: ran %+v; want one command in %s", tc.user, tc.cwd, h.cmds.cmds[n:], tc.want)
		}
	}
	// A paused sandbox is not reachable until connected: a process start
	// never wakes it, as a file call does not.
	if h.cmds.woke {
		t.Error("a process start asked to wake its sandbox")
	}
}

func tagSel(tag string) *process.ProcessSelector {
	return &process.ProcessSelector{Selector: &process.ProcessSelector_Tag{Tag: tag}}
}

// TestProcessTags: a process started with a tag keeps it (List shows it),
// and selectors by tag find the running process of the token's sandbox
// with that tag, never another sandbox's of the same tag; an ended one,
// an unknown tag and the empty tag find nothing.
func TestProcessTags(t *testing.T) {
	h := newHarness(t)
	sb := h.create("key-a", map[string]any{"templateID": "base"})
	other := h.create("key-b", map[string]any{"templateID": "base"})
	h.cmds.Exec(t.Context(), "b", other.SandboxID, false, api.CreateCommandRequest{Argv: []string{"cat"}, Tag: "srv"})
	c := h.processClient(sb.SandboxID, sb.EnvdAccessToken, "")
	for _, tag := range []string{"srv", ""} {
		req := &process.StartRequest{Process: &process.ProcessConfig{Cmd: "cat"}}
		if tag != "" {
			req.Tag = proto.String(tag)
		}
		st, err := c.Start(t.Context(), connect.NewRequest(req))
		if err != nil {
			t.Fatal(err)
		}
		if !st.Receive() {
			t.Fatalf("start: %v", st.Err())
		}
		st.Close()
	}
	l, err := c.List(t.Context(), connect.NewRequest(&process.ListRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	var tags []string
	for _, p := range l.Msg.Processes {
		tags = append(tags, fmt.Sprintf("%d:%v", p.Pid, p.Tag != nil && *p.Tag == "srv"))
	}
	if got := strings.Join(tags, " "); got != fmt.Sprintf("%d:true %d:false", firstPID, firstPID+1) {
		t.Errorf("list: %s", got)
	}
	if _, err := c.SendSignal(t.Context(), connect.NewRequest(&process.SendSignalRequest{Process: tagSel("srv"), Signal: process.Signal_SIGNAL_SIGTERM})); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(h.cmds.signals, " "); got != "cmd_2:TERM" {
		t.Errorf("signals: %s", got)
	}
	for _, tag := range []string{"srv", "none", ""} {
		_, err := c.SendSignal(t.Context(), connect.NewRequest(&process.SendSignalRequest{Process: tagSel(tag), Signal: process.Signal_SIGNAL_SIGKILL}))
		if connect.CodeOf(err) != connect.CodeNotFound {
			t.Errorf("signal tag %q: %v; want not_found", tag, err)
		}
	}
	if got := strings.Join(h.cmds.signals, " "); got != "cmd_2:TERM" {
		t.Errorf("signals after: %s", got)
	}
}
