package files_test

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/files"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/node/nodetest"
)

// sandboxes is the core as file calls see it: one sandbox, running or
// awaiting its source upload; it counts the wakes it is asked for.
type sandboxes struct {
	sb        api.Sandbox
	live      int
	delivered int
}

func (s *sandboxes) LiveSandbox(ctx context.Context, teamID, ref string, wake bool) (api.Sandbox, error) {
	s.live++
	if teamID != s.sb.TeamID || ref != s.sb.ID {
		return api.Sandbox{}, api.Errorf(api.CodeNotFound, "sandbox %s not found", ref)
	}
	return s.sb, nil
}

func (s *sandboxes) ActiveSandbox(ctx context.Context, teamID, ref string) (api.Sandbox, error) {
	if teamID != s.sb.TeamID || ref != s.sb.ID {
		return api.Sandbox{}, api.Errorf(api.CodeNotFound, "sandbox %s not found", ref)
	}
	return s.sb, nil
}

func (s *sandboxes) DeliverUpload(ctx context.Context, sb api.Sandbox, req files.ArchiveUpload, body io.Reader) (api.ArchiveResult, error) {
	s.delivered++
	return api.ArchiveResult{Path: sb.Workdir}, nil
}

func (s *sandboxes) DefaultUser(sb api.Sandbox) node.User { return node.User{UID: 4242, GID: 4242} }

// TestRefusedBeforeWaking: a call whose path, depth, edits or If-Match
// can never be right is refused without the sandbox being woken for it.
func TestRefusedBeforeWaking(t *testing.T) {
	tg := files.Target{TeamID: "team_a", Ref: "sb_1", Wake: true}
	tests := []struct {
		name string
		call func(ctx context.Context, s *files.Service) error
		want api.Code
	}{
		{"relative path", func(ctx context.Context, s *files.Service) error {
			_, err := s.StatFile(ctx, tg, "etc/passwd")
			return err
		}, api.CodeInvalidArgument},
		{"depth past the bound", func(ctx context.Context, s *files.Service) error {
			_, err := s.ListFiles(ctx, tg, files.ListQuery{Path: "/", Depth: 1000})
			return err
		}, api.CodeInvalidArgument},
		{"a cursor that is no path", func(ctx context.Context, s *files.Service) error {
			_, err := s.ListFiles(ctx, tg, files.ListQuery{Path: "/", Cursor: "x/../.."})
			return err
		}, api.CodeInvalidArgument},
		{"If-Match no version", func(ctx context.Context, s *files.Service) error {
			_, _, err := s.WriteFile(ctx, tg, files.WriteRequest{Path: "/w/a", IfMatch: []string{"not a version"}, Size: -1}, strings.NewReader("x"))
			return err
		}, api.CodePreconditionFailed},
		{"mode not octal", func(ctx context.Context, s *files.Service) error {
			_, _, err := s.WriteFile(ctx, tg, files.WriteRequest{Path: "/w/a", Mode: "rw", Size: -1}, strings.NewReader("x"))
			return err
		}, api.CodeInvalidArgument},
		{"unknown user", func(ctx context.Context, s *files.Service) error {
			_, err := s.Mkdir(ctx, tg, api.MkdirRequest{Path: "/w/d"}, "mallory")
			return err
		}, api.CodeInvalidArgument},
		{"no edits", func(ctx context.Context, s *files.Service) error {
			_, err := s.EditFile(ctx, tg, "/w/a", nil, api.EditFileRequest{})
			return err
		}, api.CodeInvalidArgument},
		{"move to a relative path", func(ctx context.Context, s *files.Service) error {
			_, err := s.MoveFile(ctx, tg, api.MoveRequest{From: "/w/a", To: "b"}, "")
			return err
		}, api.CodeInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nd := nodetest.New()
			t.Cleanup(nd.Close)
			sbs := &sandboxes{sb: api.Sandbox{ID: "sb_1", TeamID: "team_a", State: api.StateRunning}}
			err := tt.call(t.Context(), files.New(nd, sbs))
			if api.ErrorCode(err) != tt.want {
				t.Fatalf("%v; want %s", err, tt.want)
			}
			if sbs.live != 0 {
				t.Fatalf("the sandbox was looked up (and woken) %d times for a call refused on its face", sbs.live)
			}
			if calls := nd.Calls(); len(calls) != 0 {
				t.Fatalf("the node was called: %v", calls)
			}
		})
	}
}

// TestArchiveToAwaitingSandbox: an archive sent to a sandbox that is
// creating and awaits its source upload goes to its start, not into its
// files; once its source has landed, an archive goes to the node as any
// other, owned by the sandbox's default user.
func TestArchiveToAwaitingSandbox(t *testing.T) {
	ctx := t.Context()
	nd := nodetest.New()
	t.Cleanup(nd.Close)
	if err := nd.Start(ctx, node.SandboxSpec{ID: "sb_1"}); err != nil {
		t.Fatal(err)
	}
	sbs := &sandboxes{sb: api.Sandbox{ID: "sb_1", TeamID: "team_a", State: api.StateCreating, Workdir: "/workspace",
		Provision: api.Provision{Source: &api.Source{Type: api.SourceUpload}}}}
	svc := files.New(nd, sbs)
	tg := files.Target{TeamID: "team_a", Ref: "sb_1", Wake: true}
	if _, err := svc.WriteArchive(ctx, tg, files.ArchiveUpload{}, strings.NewReader("tar")); err != nil {
		t.Fatal(err)
	}
	if sbs.delivered != 1 || len(nd.Calls()) != 1 {
		t.Fatalf("an awaiting sandbox's archive: %d delivered, node calls %v; want it delivered to the start", sbs.delivered, nd.Calls())
	}
	sbs.sb.State = api.StateRunning
	sbs.sb.Source.Digest = "abc"
	res, err := svc.WriteArchive(ctx, tg, files.ArchiveUpload{Path: "/workspace/more"}, strings.NewReader("tar"))
	if err != nil || res.Path != "/workspace/more" || sbs.delivered != 1 {
		t.Fatalf("an archive once the source landed: %+v, %v (%d delivered)", res, err, sbs.delivered)
	}
	sb, _ := nd.Sandbox("sb_1")
	if string(sb.Files["/workspace/more/.archive"]) != "tar" {
		t.Fatalf("the archive did not reach the sandbox's files: %v", sb.Files)
	}
}
