package server

import (
	"context"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/imagecatalog"
	"github.com/cove-dev/cove/internal/node"
)

// The calls of the commands (commands.go) into the feature services,
// until the commands move to a room of their own.

func (s *Server) budgetRefusal(ctx context.Context, sb api.Sandbox) error {
	return s.svc.Meter.BudgetRefusal(ctx, sb)
}

func (s *Server) execSecrets(ctx context.Context, sb api.Sandbox, req api.CreateCommandRequest, cmd *api.Command, spec *node.ExecSpec) error {
	return s.svc.Vault.Exec(ctx, sb, req, cmd, spec)
}

func (s *Server) image(teamID, template string) (api.Image, bool) {
	return s.svc.Images.Image(teamID, template)
}

func (s *Server) nodeTemplate(teamID, name string) string {
	return s.svc.Images.NodeTemplate(teamID, name)
}

func imageCommand(img api.Image, req api.CreateCommandRequest, user string, u node.User, env map[string]string) (node.User, map[string]string, error) {
	return imagecatalog.Command(img, req, user, u, env)
}
