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
// rules, and writes the sandbox's own CA bundle: its template's (the
// image's certificates plus the operator's) followed by that CA's
// certificate. A sandbox without rules gets its own bundle too (without a
// CA) when its template has certificates, so that rules given it later
// (a PATCH) can add their CA in place while it runs. It returns the CA
// (nil without rules) and the bundle ("" for none: the node keeps no
// sandbox bundles, Config.SandboxCADir, or there is nothing to put in
// one; TLS to a rule's host then fails to verify, and nothing is sent).
// The CA's key stays in memory.
func (n *Node) injectCA(id, template string, p api.NetworkPolicy) (*netpolicy.SandboxCA, string, error) {
	if n.cfg.Network == nil {
		return nil, "", nil
	}
	var ca *netpolicy.SandboxCA
	if len(p.Inject) > 0 {
		var err error
		if ca, err = netpolicy.NewSandboxCA(id, nil); err != nil {
			return nil, "", fmt.Errorf("gateway CA of %s: %w", id, err)
		}
	}
	if n.cfg.SandboxCADir == "" {
		return ca, "", nil
	}
	var base []byte
	var err error
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
	if ca == nil && len(base) == 0 {
		return nil, "", nil
	}
	if len(base) > 0 && base[len(base)-1] != '\n' {
		base = append(base, '\n')
	}
	if ca != nil {
		base = append(base, ca.CertPEM()...)
	}
	if err := n.writeBundle(id, base); err != nil {
		return nil, "", err
	}
	return ca, n.sandboxBundle(id), nil
}

// writeBundle writes a sandbox's own CA bundle in place: a running
// sandbox that has it mounted (a reattach, rules added by a PATCH) sees
// the new content.
func (n *Node) writeBundle(id string, b []byte) error {
	if err := os.MkdirAll(n.cfg.SandboxCADir, 0o711); err != nil {
		return err
	}
	if err := os.Chmod(n.cfg.SandboxCADir, 0o711); err != nil {
		return err
	}
	path := n.sandboxBundle(id)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("CA bundle of %s: %w", id, err)
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(path, 0o644)
	}
	if err != nil {
		return fmt.Errorf("CA bundle of %s: %w", id, err)
	}
	return nil
}

// addCA gives a running sandbox without a gateway CA one (its first
// injection rules, by a PATCH), and adds its certificate to the bundle
// the sandbox has mounted. A sandbox started without a bundle of its own
// (its image has no CA bundle) gets the CA all the same; its TLS to a
// rule's host fails to verify until it wakes.
func (n *Node) addCA(id string) error {
	ca, err := netpolicy.NewSandboxCA(id, nil)
	if err != nil {
		return fmt.Errorf("gateway CA of %s: %w", id, err)
	}
	if n.hasBundle(id) {
		b, err := os.ReadFile(n.sandboxBundle(id))
		if err != nil {
			return fmt.Errorf("CA bundle of %s: %w", id, err)
		}
		if len(b) > 0 && b[len(b)-1] != '\n' {
			b = append(b, '\n')
		}
		if err := n.writeBundle(id, append(b, ca.CertPEM()...)); err != nil {
			return err
		}
	}
	n.cfg.Network.SetCA(id, ca)
	return nil
}

// injecting reports whether a sandbox has a gateway CA (its commands get
// the CA variables pointing at its bundle).
func (n *Node) injecting(id string) bool {
	return n.cfg.Network != nil && n.cfg.Network.CA(id) != nil && n.hasBundle(id)
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
