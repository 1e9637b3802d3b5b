package nodeapi

import (
	"context"
	"net/http"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/node"
)

// call is a JSON call: its arguments in, its answer (nil for none) out.
type call struct {
	// changes marks a state-changing call, de-duplicated by its
	// operation ID.
	changes bool
	do      func(ctx context.Context, n Node, c Call) (any, error)
}

func need[T any](p *T, name string) (T, error) {
	if p == nil {
		var zero T
		return zero, api.Errorf(api.CodeInvalidArgument, "%s is missing", name)
	}
	return *p, nil
}

// calls are the JSON calls, by the last element of their path.
func calls() map[string]call {
	return map[string]call{
		"admit": {false, func(ctx context.Context, n Node, c Call) (any, error) {
			spec, err := need(c.Spec, "spec")
			if err != nil {
				return nil, err
			}
			return nil, n.Admit(ctx, spec)
		}},
		"start": {true, func(ctx context.Context, n Node, c Call) (any, error) {
			spec, err := need(c.Spec, "spec")
			if err != nil {
				return nil, err
			}
			return nil, n.Start(ctx, spec)
		}},
		"wake": {true, func(ctx context.Context, n Node, c Call) (any, error) {
			spec, err := need(c.Spec, "spec")
			if err != nil {
				return nil, err
			}
			return nil, n.Wake(ctx, spec)
		}},
		"attach": {true, func(ctx context.Context, n Node, c Call) (any, error) {
			spec, err := need(c.Spec, "spec")
			if err != nil {
				return nil, err
			}
			return nil, n.Attach(ctx, spec, c.Commands)
		}},
		"destroy": {true, func(ctx context.Context, n Node, c Call) (any, error) {
			return nil, n.Destroy(ctx, c.Sandbox)
		}},
		"destroy-runtime": {true, func(ctx context.Context, n Node, c Call) (any, error) {
			return nil, n.DestroyRuntime(ctx, c.Sandbox)
		}},
		"finish-sleep": {true, func(ctx context.Context, n Node, c Call) (any, error) {
			return n.FinishSleep(ctx, c.Sandbox)
		}},
		"drop-save": {true, func(ctx context.Context, n Node, c Call) (any, error) {
			return nil, n.DropSave(ctx, c.Sandbox)
		}},
		"copy-save": {true, func(ctx context.Context, n Node, c Call) (any, error) {
			return n.CopySave(ctx, c.From, c.To)
		}},
		"snapshot": {true, func(ctx context.Context, n Node, c Call) (any, error) {
			return n.Snapshot(ctx, c.Sandbox, c.Snapshot, c.Asleep, c.Save)
		}},
		"drop-snapshot": {true, func(ctx context.Context, n Node, c Call) (any, error) {
			return nil, n.DropSnapshot(ctx, c.Snapshot)
		}},
		"create-volume": {true, func(ctx context.Context, n Node, c Call) (any, error) {
			v, err := need(c.Volume, "volume")
			if err != nil {
				return nil, err
			}
			return n.CreateVolume(ctx, v.ID, c.SizeMiB)
		}},
		"drop-volume": {true, func(ctx context.Context, n Node, c Call) (any, error) {
			v, err := need(c.Volume, "volume")
			if err != nil {
				return nil, err
			}
			return nil, n.DropVolume(ctx, v)
		}},
		"volume-usage": {false, func(ctx context.Context, n Node, c Call) (any, error) {
			v, err := need(c.Volume, "volume")
			if err != nil {
				return nil, err
			}
			return n.VolumeUsage(ctx, v)
		}},
		"known": {false, func(ctx context.Context, n Node, c Call) (any, error) {
			ids, err := n.Known(ctx)
			if ids == nil {
				ids = []string{}
			}
			return ids, err
		}},
		"lose": {true, func(ctx context.Context, n Node, c Call) (any, error) {
			n.Lose(c.Sandbox, c.Commands)
			return nil, nil
		}},
		"set-policy": {true, func(ctx context.Context, n Node, c Call) (any, error) {
			p, err := need(c.Policy, "policy")
			if err != nil {
				return nil, err
			}
			return nil, n.SetPolicy(c.Sandbox, p)
		}},
		"set-inject-secrets": {true, func(ctx context.Context, n Node, c Call) (any, error) {
			return nil, n.SetInjectSecrets(c.Sandbox, c.Inject)
		}},
		"use-setup-policy": {true, func(ctx context.Context, n Node, c Call) (any, error) {
			n.UseSetupPolicy(c.Sandbox, c.On)
			return nil, nil
		}},
		"set-hostname": {true, func(ctx context.Context, n Node, c Call) (any, error) {
			return nil, n.SetHostname(ctx, c.Sandbox, c.Hostname)
		}},
		// drain-observations hands reports over once: its operation ID makes
		// a retry get the same reports rather than lose them.
		"drain-observations": {true, func(ctx context.Context, n Node, c Call) (any, error) {
			obs := n.DrainObservations()
			if obs == nil {
				obs = []node.Observation{}
			}
			return obs, nil
		}},
		"pending-observations": {false, func(ctx context.Context, n Node, c Call) (any, error) {
			obs := n.PendingObservations(c.Sandbox)
			if obs == nil {
				obs = []api.NetworkObservation{}
			}
			return obs, nil
		}},
		"exec": {true, func(ctx context.Context, n Node, c Call) (any, error) {
			spec, err := need(c.Exec, "exec")
			if err != nil {
				return nil, err
			}
			st, err := n.Exec(ctx, c.Sandbox, spec)
			if err != nil || st.PID == 0 {
				// No pid known: nothing to answer (204), as a node from
				// before pids answered every exec.
				return nil, err
			}
			return st, nil
		}},
		"signal": {true, func(ctx context.Context, n Node, c Call) (any, error) {
			return nil, n.Signal(ctx, c.Sandbox, c.Command, c.Signal)
		}},
		"resize": {true, func(ctx context.Context, n Node, c Call) (any, error) {
			size, err := need(c.Size, "size")
			if err != nil {
				return nil, err
			}
			return nil, n.Resize(ctx, c.Sandbox, c.Command, size)
		}},
		"stat-file": {false, func(ctx context.Context, n Node, c Call) (any, error) {
			return n.StatFile(ctx, c.Sandbox, c.Path)
		}},
		"list-files": {false, func(ctx context.Context, n Node, c Call) (any, error) {
			spec, err := need(c.List, "list")
			if err != nil {
				return nil, err
			}
			return n.ListFiles(ctx, c.Sandbox, spec)
		}},
		"edit-file": {true, func(ctx context.Context, n Node, c Call) (any, error) {
			spec, err := need(c.Edit, "edit")
			if err != nil {
				return nil, err
			}
			return n.EditFile(ctx, c.Sandbox, spec)
		}},
		"mkdir": {true, func(ctx context.Context, n Node, c Call) (any, error) {
			spec, err := need(c.Mkdir, "mkdir")
			if err != nil {
				return nil, err
			}
			return n.Mkdir(ctx, c.Sandbox, spec)
		}},
		"move-file": {true, func(ctx context.Context, n Node, c Call) (any, error) {
			spec, err := need(c.Move, "move")
			if err != nil {
				return nil, err
			}
			return n.MoveFile(ctx, c.Sandbox, spec)
		}},
		"remove-file": {true, func(ctx context.Context, n Node, c Call) (any, error) {
			return nil, n.RemoveFile(ctx, c.Sandbox, c.Path, c.Recursive)
		}},
		"clone-git": {true, func(ctx context.Context, n Node, c Call) (any, error) {
			spec, err := need(c.Git, "git")
			if err != nil {
				return nil, err
			}
			commit, err := n.CloneGit(ctx, c.Sandbox, spec)
			return Cloned{Commit: commit}, err
		}},
		"stats": {false, func(ctx context.Context, n Node, c Call) (any, error) {
			st := n.Stats(ctx, c.IDs)
			if st == nil {
				st = map[string]node.Stats{}
			}
			return st, nil
		}},
		"gpus": {false, func(ctx context.Context, n Node, c Call) (any, error) {
			return n.GPUs(), nil
		}},
		"publish": {true, func(ctx context.Context, n Node, c Call) (any, error) {
			return nil, n.Publish(ctx, c.Sandbox, c.Ports)
		}},
		"publish-port": {true, func(ctx context.Context, n Node, c Call) (any, error) {
			return nil, n.PublishPort(ctx, c.Sandbox, c.Port)
		}},
		"unpublish-port": {true, func(ctx context.Context, n Node, c Call) (any, error) {
			return nil, n.UnpublishPort(ctx, c.Sandbox, c.Port)
		}},
	}
}

// maxCall bounds a JSON call's body.
const maxCall = 4 << 20

func (s *Server) routes() {
	for name, c := range calls() {
		h := s.jsonCall(c)
		if c.changes {
			h = s.once(h)
		}
		s.mux.HandleFunc("POST "+Prefix+name, h)
	}
	s.mux.HandleFunc("GET "+Prefix+"events", s.handleEvents)
	s.mux.HandleFunc("POST "+Prefix+"stdin", s.once(s.handleStdin))
	s.mux.HandleFunc("POST "+Prefix+"write-file", s.once(s.handleWriteFile))
	s.mux.HandleFunc("POST "+Prefix+"write-archive", s.once(s.handleWriteArchive))
	s.mux.HandleFunc("POST "+Prefix+"read-file", s.handleReadFile)
	s.mux.HandleFunc("POST "+Prefix+"read-archive", s.handleReadArchive)
	s.mux.HandleFunc("GET "+Prefix+"output/watch", s.handleOutputWatch)
	s.mux.HandleFunc("GET "+Prefix+"output/read", s.handleOutputRead)
	s.mux.HandleFunc("GET "+Prefix+"output/stream", s.handleOutputStream)
	s.mux.HandleFunc("GET "+Prefix+"dial", s.handleDial)
	s.mux.HandleFunc("GET "+Prefix+"files/watch", s.handleWatch)
}

func (s *Server) jsonCall(c call) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		args, ok := readArgs(w, r)
		if !ok {
			return
		}
		out, err := c.do(r.Context(), s.n, args)
		if err != nil {
			writeError(w, err)
			return
		}
		if out == nil {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		writeJSON(w, out)
	}
}
