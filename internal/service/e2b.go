package service

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"time"

	"github.com/cove-dev/cove/internal/e2b"
)

// E2BConfig says where E2B's protocol is served (internal/e2b): its REST
// API and the sandbox side (envd's), both or neither. Default none.
type E2BConfig struct {
	// APIListen is the REST API's address (the SDKs' E2B_API_URL).
	APIListen string
	// SandboxListen is the sandbox side's address (E2B_SANDBOX_URL).
	SandboxListen string
	// Templates maps E2B template names to cove templates or images.
	Templates map[string]string
}

func (c E2BConfig) enabled() bool { return c.APIListen != "" || c.SandboxListen != "" }

// Validate reports a half-configured translator: the REST API hands out
// access tokens that only the sandbox side takes.
func (c E2BConfig) Validate() error {
	if c.enabled() && (c.APIListen == "" || c.SandboxListen == "") {
		return errors.New("E2B listeners: set both --e2b-api-listen and --e2b-sandbox-listen, or neither")
	}
	for name, t := range c.Templates {
		if name == "" || t == "" {
			return fmt.Errorf("E2B template %q=%q: want NAME=TEMPLATE", name, t)
		}
	}
	return nil
}

// serveE2B binds the E2B listeners cfg asks for and adds them to
// listeners ("e2b-api", "e2b-sandbox"); they are served and stopped with
// the API.
func (ps *planeSide) serveE2B(ctx context.Context, listeners Listeners) ([]*servedListener, error) {
	cfg, plane, log := ps.cfg, ps.plane, ps.log.With("listener", "e2b")
	if !cfg.E2B.enabled() {
		return nil, nil
	}
	tokens, err := e2b.LoadTokens(filepath.Join(cfg.DataDir, "e2b-token.key"))
	if err != nil {
		return nil, err
	}
	ecfg := e2b.Config{Templates: cfg.E2B.Templates}
	apiLn, err := net.Listen("tcp", cfg.E2B.APIListen)
	if err != nil {
		return nil, fmt.Errorf("E2B API: %w", err)
	}
	sideLn, err := net.Listen("tcp", cfg.E2B.SandboxListen)
	if err != nil {
		apiLn.Close()
		return nil, fmt.Errorf("E2B sandbox listener: %w", err)
	}
	listeners["e2b-api"] = apiLn.Addr().String()
	listeners["e2b-sandbox"] = sideLn.Addr().String()
	base := context.WithoutCancel(ctx)
	return []*servedListener{
		{ln: apiLn, srv: newHTTPServer(cfg.HTTP, e2b.NewAPI(ecfg, plane.Core, plane.Teams, plane.Meter, tokens, log, time.Now), base)},
		{ln: sideLn, srv: newHTTPServer(cfg.HTTP, e2b.NewSandboxSide(plane.Core, plane.Commands, plane.Files, tokens, ps.st, log), base)},
	}, nil
}
