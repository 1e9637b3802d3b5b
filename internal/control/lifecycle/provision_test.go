package lifecycle_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"github.com/cove-dev/cove/internal/control/files"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/lifecycle"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/node/nodetest"
)

func sum(b string) string {
	s := sha256.Sum256([]byte(b))
	return hex.EncodeToString(s[:])
}

func TestUploadSource(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	sb, err := h.srv.CreateSandbox(ctx, h.a, api.CreateSandboxRequest{Source: &api.Source{Type: api.SourceUpload}})
	if err != nil {
		t.Fatal(err)
	}
	ft := files.Target{TeamID: h.a, Ref: sb.ID}
	// Until the archive lands the sandbox is creating, saying what it awaits.
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, _ := h.srv.GetSandbox(ctx, h.a, sb.ID)
		if strings.Contains(got.StateReason, "waiting for the source upload") {
			if got.State != api.StateCreating {
				t.Fatalf("awaiting sandbox is %s", got.State)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox never awaited its upload: %+v", got)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// A digest that does not match refuses the archive; the sandbox waits on.
	_, err = h.plane.Files.WriteArchive(ctx, ft, files.ArchiveUpload{SHA256: sum("other")}, strings.NewReader("archive"))
	wantCode(t, err, api.CodeUnprocessable)
	// Only into the workdir.
	_, err = h.plane.Files.WriteArchive(ctx, ft, files.ArchiveUpload{Path: "/etc"}, strings.NewReader("archive"))
	wantCode(t, err, api.CodeInvalidArgument)
	if got, _ := h.srv.GetSandbox(ctx, h.a, sb.ID); got.State != api.StateCreating {
		t.Fatalf("after a refused upload the sandbox is %s (%s)", got.State, got.StateReason)
	}
	// The digest may come after the body, as the SDK sends it.
	res, err := h.plane.Files.WriteArchive(ctx, ft, files.ArchiveUpload{Trailer: func() (string, error) { return sum("archive"), nil }}, strings.NewReader("archive"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Path != "/workspace" || res.Bytes != 7 {
		t.Fatalf("result = %+v", res)
	}
	got := h.wait(t, h.a, sb.ID, api.StateRunning)
	if got.Source == nil || got.Source.Digest != sum("archive") || got.StateReason != "" {
		t.Fatalf("running sandbox's source = %+v, reason %q", got.Source, got.StateReason)
	}
	if n, _ := h.node.Sandbox(sb.ID); string(n.Files["/workspace/.archive"]) != "archive" {
		t.Fatalf("node files = %v", n.Files)
	}
}

func TestUploadAwaitedIsCancelledByTerminate(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	sb, err := h.srv.CreateSandbox(ctx, h.a, api.CreateSandboxRequest{Source: &api.Source{Type: api.SourceUpload}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.srv.TerminateSandbox(ctx, h.a, sb.ID); err != nil {
		t.Fatal(err)
	}
	h.wait(t, h.a, sb.ID, api.StateTerminated)
	_, err = h.plane.Files.WriteArchive(ctx, files.Target{TeamID: h.a, Ref: sb.ID}, files.ArchiveUpload{}, strings.NewReader("x"))
	if err == nil {
		t.Fatal("an upload into a terminated sandbox was taken")
	}
}

func TestSetup(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	var inSetup atomic.Bool
	var sandboxID atomic.Value
	h.node.Run = func(ctx context.Context, spec node.ExecSpec, out *nodetest.Output) node.Exit {
		if n, ok := h.node.Sandbox(sandboxID.Load().(string)); ok {
			inSetup.Store(n.InSetup)
		}
		out.Write("stdout", []byte("installing\n"))
		if strings.Contains(spec.Shell, "fail") {
			return node.Exit{ExitCode: 3}
		}
		if spec.Env["FROM_SETUP"] != "yes" {
			return node.Exit{ExitCode: 9}
		}
		return node.Exit{}
	}
	create := func(cmd string) api.Sandbox {
		t.Helper()
		req := api.CreateSandboxRequest{
			Network: &api.NetworkPolicy{Allow: []string{"example.com"}},
			Setup: &api.Setup{Command: cmd, Env: map[string]string{"FROM_SETUP": "yes"},
				Network: &api.NetworkPolicy{Allow: []string{"deb.example.org"}}},
		}
		sb, err := h.srv.CreateSandbox(ctx, h.a, req)
		if err != nil {
			t.Fatal(err)
		}
		sandboxID.Store(sb.ID)
		if sb.Network.SetupAllow[0] != "deb.example.org" || sb.Setup.TimeoutS != 1800 {
			t.Fatalf("created = %+v", sb)
		}
		return sb
	}

	sb := create("make deps")
	got := h.wait(t, h.a, sb.ID, api.StateRunning)
	if got.SetupCommandID == "" || !inSetup.Load() {
		t.Fatalf("setup command %q, in setup policy while it ran: %v", got.SetupCommandID, inSetup.Load())
	}
	if n, _ := h.node.Sandbox(sb.ID); n.InSetup {
		t.Fatal("the setup policy still applies once the sandbox runs")
	}
	c, err := h.plane.Commands.GetCommand(ctx, h.a, sb.ID, got.SetupCommandID)
	if err != nil || c.State != api.CommandExited || *c.ExitCode != 0 {
		t.Fatalf("setup command = %+v, %v", c, err)
	}
	// The state is stored before its event is appended: the wait may
	// return between the two.
	ev := h.eventsUntil(t, h.a, sb.ID, "sandbox.running")
	for _, want := range []string{"sandbox.creating", "sandbox.setting_up", "command.started", "setup.exited", "sandbox.running"} {
		if !slices.Contains(ev, want) {
			t.Fatalf("events %v lack %s", ev, want)
		}
	}
	if slices.Index(ev, "setup.exited") > slices.Index(ev, "sandbox.running") {
		t.Fatalf("events out of order: %v", ev)
	}

	sb = create("fail please")
	got = h.wait(t, h.a, sb.ID, api.StateFailed)
	if !strings.Contains(got.StateReason, "exited with code 3") || !strings.Contains(got.StateReason, got.SetupCommandID) {
		t.Fatalf("failed setup's reason = %q", got.StateReason)
	}
	// Its output stays readable.
	_, out, err := h.plane.Commands.CommandOutput(ctx, h.a, sb.ID, got.SetupCommandID)
	if err != nil {
		t.Fatal(err)
	}
	out.Close()
}

func TestProvisionRefused(t *testing.T) {
	h := newHarness(t)
	for name, req := range map[string]struct {
		req  api.CreateSandboxRequest
		code api.Code
	}{
		"unknown source type":      {api.CreateSandboxRequest{Source: &api.Source{Type: "ftp"}}, api.CodeInvalidArgument},
		"asset without id":         {api.CreateSandboxRequest{Source: &api.Source{Type: "asset"}}, api.CodeInvalidArgument},
		"upload with url":          {api.CreateSandboxRequest{Source: &api.Source{Type: "upload", URL: "https://x"}}, api.CodeInvalidArgument},
		"digest from client":       {api.CreateSandboxRequest{Source: &api.Source{Type: "upload", Digest: "ab"}}, api.CodeInvalidArgument},
		"git url with credentials": {api.CreateSandboxRequest{Source: &api.Source{Type: "git", URL: "https://x:tok@git.example/r.git"}}, api.CodeInvalidArgument},
		"git url ssh":              {api.CreateSandboxRequest{Source: &api.Source{Type: "git", URL: "ssh://git.example/r.git"}}, api.CodeInvalidArgument},
		"git url loopback ip":      {api.CreateSandboxRequest{Source: &api.Source{Type: "git", URL: "http://127.0.0.1:8080/r.git"}}, api.CodeInvalidArgument},
		"git url private ip":       {api.CreateSandboxRequest{Source: &api.Source{Type: "git", URL: "https://[fd00::1]/r.git"}}, api.CodeInvalidArgument},
		"git ref as option":        {api.CreateSandboxRequest{Source: &api.Source{Type: "git", URL: "https://git.example/r.git", Ref: "--upload-pack=x"}}, api.CodeInvalidArgument},
		"git depth":                {api.CreateSandboxRequest{Source: &api.Source{Type: "git", URL: "https://git.example/r.git", Depth: -1}}, api.CodeInvalidArgument},
		"git secret unknown":       {api.CreateSandboxRequest{Source: &api.Source{Type: "git", URL: "https://git.example/r.git", AuthSecret: "nope"}}, api.CodeNotFound},
		"setup without command":    {api.CreateSandboxRequest{Setup: &api.Setup{TimeoutS: 5}}, api.CodeInvalidArgument},
		"setup timeout negative":   {api.CreateSandboxRequest{Setup: &api.Setup{Command: "x", TimeoutS: -1}}, api.CodeInvalidArgument},
		"setup env name":           {api.CreateSandboxRequest{Setup: &api.Setup{Command: "x", Env: map[string]string{"1A": ""}}}, api.CodeInvalidArgument},
		"setup secret unknown":     {api.CreateSandboxRequest{Setup: &api.Setup{Command: "x", Secrets: map[string]string{"TOKEN": "nope"}}}, api.CodeNotFound},
		"setup secret and env":     {api.CreateSandboxRequest{Setup: &api.Setup{Command: "x", Env: map[string]string{"T": "1"}, Secrets: map[string]string{"T": "nope"}}}, api.CodeInvalidArgument},
		"setup network bad":        {api.CreateSandboxRequest{Setup: &api.Setup{Command: "x", Network: &api.NetworkPolicy{Allow: []string{"::bad::"}}}}, api.CodeInvalidArgument},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := h.srv.CreateSandbox(t.Context(), h.a, req.req)
			wantCode(t, err, req.code)
		})
	}
	l, err := h.srv.ListSandboxes(t.Context(), h.a, lifecycle.SandboxQuery{})
	if err != nil || len(l.Items) != 0 {
		t.Fatalf("refused creates left %d sandboxes (%v)", len(l.Items), err)
	}
}

func TestSetupCache(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	var runs atomic.Int32
	h.node.Run = func(ctx context.Context, spec node.ExecSpec, out *nodetest.Output) node.Exit {
		runs.Add(1)
		return node.Exit{}
	}
	req := func(cmd string) api.CreateSandboxRequest {
		return api.CreateSandboxRequest{Setup: &api.Setup{Command: cmd, Cache: true}}
	}
	create := func(r api.CreateSandboxRequest) api.Sandbox {
		t.Helper()
		sb, err := h.srv.CreateSandbox(ctx, h.a, r)
		if err != nil {
			t.Fatal(err)
		}
		return h.wait(t, h.a, sb.ID, api.StateRunning)
	}
	first := create(req("make deps"))
	if first.SetupCached || first.SetupCommandID == "" || runs.Load() != 1 {
		t.Fatalf("first: cached %v, command %q, runs %d", first.SetupCached, first.SetupCommandID, runs.Load())
	}
	second := create(req("make deps"))
	if !second.SetupCached || second.SetupCommandID != "" || runs.Load() != 1 {
		t.Fatalf("second: cached %v, command %q, runs %d", second.SetupCached, second.SetupCommandID, runs.Load())
	}
	// Another setup is another key; the other team has a cache of its own.
	if other := create(req("make other")); other.SetupCached || runs.Load() != 2 {
		t.Fatalf("another setup: cached %v, runs %d", other.SetupCached, runs.Load())
	}
	sb, err := h.srv.CreateSandbox(ctx, h.b, req("make deps"))
	if err != nil {
		t.Fatal(err)
	}
	if got := h.wait(t, h.b, sb.ID, api.StateRunning); got.SetupCached {
		t.Fatal("team b started from team a's cache")
	}
}

type fakeSecrets map[string]string

func (f fakeSecrets) ResolveSecrets(ctx context.Context, teamID string, names map[string]string) (map[string]string, error) {
	out := map[string]string{}
	for k, name := range names {
		v, ok := f[teamID+"/"+name]
		if !ok {
			return nil, api.Errorf(api.CodeUnprocessable, "secret %q not found", name)
		}
		out[k] = v
	}
	return out, nil
}

func TestGitSource(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	h.srv.SetSecretResolver(fakeSecrets{h.a + "/gh": "tok-123"})
	sb, err := h.srv.CreateSandbox(ctx, h.a, api.CreateSandboxRequest{Source: &api.Source{
		Type: "git", URL: "https://git.example/o/r.git", Ref: "main", Depth: 1, AuthSecret: "gh"}})
	if err != nil {
		t.Fatal(err)
	}
	got := h.wait(t, h.a, sb.ID, api.StateRunning)
	if got.Source.Digest != "0123456789abcdef0123456789abcdef01234567" || got.Source.AuthSecret != "gh" {
		t.Fatalf("source = %+v", got.Source)
	}
	n, _ := h.node.Sandbox(sb.ID)
	if spec := string(n.Files["/workspace/.git-spec"]); spec != "https://git.example/o/r.git main 1 tok-123" {
		t.Fatalf("the node got %q", spec)
	}
	// git ran as IDs held for the clone alone, not the sandbox's, and
	// released once it ended: only the sandbox's range is held.
	ranges, err := h.st.ListIDRanges(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ranges) != 1 || ranges[0].SandboxID != sb.ID {
		t.Fatalf("ranges held after the clone: %+v; want the sandbox's alone", ranges)
	}
	var cloneHost, cloneSize uint32
	fmt.Sscan(string(n.Files["/workspace/.git-ids"]), &cloneHost, &cloneSize)
	if cloneSize != node.IDRangeSize || cloneHost < node.IDRangeFirst || cloneHost == ranges[0].HostID {
		t.Fatalf("the clone ran as %d (+%d); the sandbox holds %d", cloneHost, cloneSize, ranges[0].HostID)
	}
	// A clone that fails fails the sandbox with the node's reason.
	h.node.Fail("clone", api.Errorf(api.CodeUnprocessable, `git ref "nope" was not found in https://git.example/o/r.git`))
	sb, err = h.srv.CreateSandbox(ctx, h.a, api.CreateSandboxRequest{Source: &api.Source{Type: "git", URL: "https://git.example/o/r.git", Ref: "nope"}})
	if err != nil {
		t.Fatal(err)
	}
	got = h.wait(t, h.a, sb.ID, api.StateFailed)
	if !strings.Contains(got.StateReason, `git ref "nope" was not found`) {
		t.Fatalf("reason = %q", got.StateReason)
	}
	// A secret the team lacks is refused at create; nothing is made.
	h.node.Fail("clone", nil)
	_, err = h.srv.CreateSandbox(ctx, h.b, api.CreateSandboxRequest{Source: &api.Source{Type: "git", URL: "https://git.example/o/r.git", AuthSecret: "gh"}})
	if err == nil || !strings.Contains(err.Error(), `secret "gh" not found`) {
		t.Fatalf("create with a secret the team lacks: %v", err)
	}
}
