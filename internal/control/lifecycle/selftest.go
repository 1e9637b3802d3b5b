package lifecycle

import (
	"context"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/selftest"
)

// SelfTest qualifies a template (internal/control/selftest) on the
// core's node, with a default sandbox's resources.
func (s *Core) SelfTest(ctx context.Context, template string) (api.SelfTest, error) {
	return selftest.Run(ctx, selftest.Deps{
		Node: s.node, Exits: s.exits, Spec: s.spec, Resources: s.cfg.DefaultResources, Workdir: s.cfg.DefaultWorkdir,
		Now: s.now, Log: s.log,
	}, template)
}
