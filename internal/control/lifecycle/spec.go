package lifecycle

import (
	"context"
	"fmt"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/node"
)

// spec is what the node needs to start a sandbox.
func (s *Core) spec(sb api.Sandbox) node.SandboxSpec {
	return node.SandboxSpec{
		ID: sb.ID, Hostname: hostname(sb), Template: s.svc.Images.NodeTemplate(sb.TeamID, sb.Template),
		Resources: sb.Resources, Pids: s.cfg.PidsLimit, Workdir: sb.Workdir,
		Network: sb.Network, SetID: sb.SetID,
	}
}

// startSpec is spec with the sandbox's range, for a start or a wake.
func (s *Core) startSpec(ctx context.Context, sb api.Sandbox) (node.SandboxSpec, error) {
	spec := s.spec(sb)
	r, err := s.store.GetIDRange(ctx, sb.ID)
	switch {
	case api.ErrorCode(err) == api.CodeNotFound:
		spec.IDs = node.LegacyIDRange // created before ranges
	case err != nil:
		return spec, fmt.Errorf("host id range of %s: %w", sb.ID, err)
	default:
		spec.IDs = node.IDRange{HostID: r.HostID, Size: r.Size}
	}
	spec.Inject = s.svc.Vault.Injection(ctx, sb)
	if spec.Layers, err = s.layersOf(ctx, sb.ID); err != nil {
		return spec, fmt.Errorf("layers of %s: %w", sb.ID, err)
	}
	if spec.Volumes, err = s.volumeSpecs(ctx, sb); err != nil {
		return spec, err
	}
	return spec, nil
}
