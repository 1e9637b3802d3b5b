package local

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/netpolicy"
	"github.com/cove-dev/cove/internal/node/runtime"
)

// maxBundle bounds the CA bundle of an image read for a sandbox's own.
const maxBundle = 8 << 20

// injectCA makes the gateway CA of a sandbox whose policy has injection
// rules, and writes the sandbox's CA bundle: its template's (the image's
// certificates plus the operator's) followed by that CA's certificate. It
// returns nil and "" for a sandbox without rules, or when the node keeps
// no sandbox bundles (Config.SandboxCADir): its TLS to a rule's host then
// fails to verify, and nothing is sent. The CA's key stays in memory.
func (n *Node) injectCA(id, template string, p api.NetworkPolicy) (*netpolicy.SandboxCA, string, error) {
	if len(p.Inject) == 0 || n.cfg.Network == nil {
		return nil, "", nil
	}
	ca, err := netpolicy.NewSandboxCA(id, nil)
	if err != nil {
		return nil, "", fmt.Errorf("gateway CA of %s: %w", id, err)
	}
	if n.cfg.SandboxCADir == "" {
		return ca, "", nil
	}
	var base []byte
	if b := n.caBundle(template); b != "" {
		base, err = os.ReadFile(b)
	} else if img, ok := n.template(template); ok {
		base, err = img.ReadFile(runtime.CABundlePath, maxBundle)
		if errors.Is(err, fs.ErrNotExist) {
			base, err = nil, nil
		}
	}
	if err != nil {
		return nil, "", fmt.Errorf("CA bundle of %s: %w", id, err)
	}
	if len(base) > 0 && base[len(base)-1] != '\n' {
		base = append(base, '\n')
	}
	if err := os.MkdirAll(n.cfg.SandboxCADir, 0o711); err != nil {
		return nil, "", err
	}
	if err := os.Chmod(n.cfg.SandboxCADir, 0o711); err != nil {
		return nil, "", err
	}
	path := n.sandboxBundle(id)
	// In place: a running sandbox that has it mounted (a reattach) sees
	// the new CA.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, "", fmt.Errorf("CA bundle of %s: %w", id, err)
	}
	_, err = f.Write(append(base, ca.CertPEM()...))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(path, 0o644)
	}
	if err != nil {
		return nil, "", fmt.Errorf("CA bundle of %s: %w", id, err)
	}
	return ca, path, nil
}

func (n *Node) sandboxBundle(id string) string {
	return filepath.Join(n.cfg.SandboxCADir, id+".crt")
}

// removeBundle removes a sandbox's own CA bundle, if it has one.
func (n *Node) removeBundle(id string) {
	if n.cfg.SandboxCADir != "" {
		os.Remove(n.sandboxBundle(id))
	}
}

// hasBundle reports whether a sandbox has a CA bundle of its own.
func (n *Node) hasBundle(id string) bool {
	if n.cfg.SandboxCADir == "" {
		return false
	}
	_, err := os.Stat(n.sandboxBundle(id))
	return err == nil
}
