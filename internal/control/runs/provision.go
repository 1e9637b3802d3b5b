package runs

import (
	"fmt"
	"strings"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/gitsource"
)

// The checks of what a run starts with: its source and a sandbox's setup.

// DefaultSetupTimeoutS bounds a setup that names no timeout_s.
const DefaultSetupTimeoutS = 1800

// CheckProvision validates a create request's source and setup and
// returns what the sandbox keeps of them; secrets says whether secrets
// are configured (a setup or a source that names one is refused if not).
func CheckProvision(req api.CreateSandboxRequest, secrets bool) (api.Provision, error) {
	var p api.Provision
	src, err := CheckSource(req.Source, secrets)
	if err != nil {
		return p, err
	}
	p.Source = src
	if st := req.Setup; st != nil {
		if st.Command == "" {
			if st.Network != nil || len(st.Env) > 0 || len(st.Secrets) > 0 || st.TimeoutS != 0 || st.Cache {
				return p, invalid("setup needs a command")
			}
			return p, nil
		}
		if len(st.Command) > MaxCommandSize || strings.ContainsRune(st.Command, 0) {
			return p, invalid("setup.command must be at most %d bytes without NUL", MaxCommandSize)
		}
		if err := CheckEnv("setup.env", st.Env); err != nil {
			return p, err
		}
		for k := range st.Secrets {
			if !envKeyRE.MatchString(k) {
				return p, invalid("setup.secrets: variable name %q is invalid: use letters, digits and '_', not starting with a digit", k)
			}
		}
		if len(st.Secrets) > 0 {
			if err := secretsConfigured(secrets, "setup.secrets"); err != nil {
				return p, err
			}
		}
		timeout := st.TimeoutS
		switch {
		case timeout == 0:
			timeout = DefaultSetupTimeoutS
		case timeout < 0 || timeout > MaxTimeoutS:
			return p, rangeError("setup.timeout_s", fmt.Sprint(timeout), "1", fmt.Sprint(MaxTimeoutS))
		}
		setup := *st
		setup.TimeoutS = timeout
		if setup.Network != nil {
			// The policy itself is kept in network.setup_allow.
			setup.Network = &api.NetworkPolicy{Allow: setup.Network.Allow}
		}
		p.Setup = &setup
	}
	return p, nil
}

// CheckSource validates a run's source (a sandbox's, a workload's) and
// returns what the run keeps of it; nil for none or an empty one.
func CheckSource(src *api.Source, secrets bool) (*api.Source, error) {
	var out *api.Source
	if src != nil {
		switch src.Type {
		case "", api.SourceEmpty:
			if src.AssetID != "" || src.SnapshotID != "" || src.URL != "" || src.Ref != "" || src.AuthSecret != "" || src.Depth != 0 {
				return nil, invalid("source type empty takes no asset_id, url, ref, depth or auth_secret")
			}
		case api.SourceUpload:
			if src.AssetID != "" || src.URL != "" || src.Ref != "" || src.AuthSecret != "" || src.Depth != 0 {
				return nil, invalid("source type upload takes no other field: send the folder with PUT /v1/sandboxes/{id}/files/archive after create")
			}
			out = &api.Source{Type: api.SourceUpload}
		case api.SourceAsset:
			if src.AssetID == "" {
				return nil, invalid("source type asset needs asset_id (an ID from POST /v1/assets)")
			}
			if src.URL != "" || src.Ref != "" || src.AuthSecret != "" || src.Depth != 0 {
				return nil, invalid("source type asset takes only asset_id")
			}
			out = &api.Source{Type: api.SourceAsset, AssetID: src.AssetID}
		case api.SourceSnapshot:
			if src.SnapshotID == "" {
				return nil, invalid("source type snapshot needs snapshot_id (an ID or name from GET /v1/snapshots)")
			}
			if src.AssetID != "" || src.URL != "" || src.Ref != "" || src.AuthSecret != "" || src.Depth != 0 {
				return nil, invalid("source type snapshot takes only snapshot_id")
			}
			out = &api.Source{Type: api.SourceSnapshot, SnapshotID: src.SnapshotID}
		case api.SourceGit:
			g, err := gitsource.Check(*src)
			if err != nil {
				return nil, err
			}
			if g.AuthSecret != "" {
				if err := secretsConfigured(secrets, "source.auth_secret"); err != nil {
					return nil, err
				}
			}
			out = &g
		default:
			return nil, invalid("source.type %q is unknown; use empty, upload, asset, git or snapshot", src.Type)
		}
		if src.Digest != "" {
			return nil, invalid("source.digest is set by the server; leave it out")
		}
	}
	return out, nil
}

func secretsConfigured(secrets bool, field string) error {
	if !secrets {
		return api.Errorf(api.CodeUnprocessable, "%s names secrets, but secrets are not configured on this server", field)
	}
	return nil
}
