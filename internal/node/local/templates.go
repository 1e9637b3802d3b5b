package local

import (
	"context"
	"strings"

	"github.com/cove-dev/cove/internal/node/image"
)

// AddTemplate serves a template whose image was built after the node
// started, with its CA bundle ("" for none).
func (n *Node) AddTemplate(name string, img image.Image, caBundle string) {
	n.tmplMu.Lock()
	defer n.tmplMu.Unlock()
	if n.cfg.Templates == nil {
		n.cfg.Templates = map[string]image.Image{}
	}
	n.cfg.Templates[name] = img
	if caBundle != "" {
		if n.cfg.CABundles == nil {
			n.cfg.CABundles = map[string]string{}
		}
		n.cfg.CABundles[name] = caBundle
	}
}

func (n *Node) template(name string) (image.Image, bool) {
	n.tmplMu.RLock()
	img, ok := n.cfg.Templates[name]
	n.tmplMu.RUnlock()
	if ok || n.cfg.ImagesDir == "" || !strings.HasPrefix(name, importedPrefix) {
		return img, ok
	}
	// An imported image: loaded from the images dir each time it is
	// asked for, since it may be deleted (when no sandbox uses it) and
	// imported again.
	img, err := image.Load(n.cfg.ImagesDir, name)
	if err != nil || !img.Imported() {
		return image.Image{}, false
	}
	return img, true
}

// fetchTemplate brings an imported image the node lacks through
// Config.FetchImage; templates it has, and those not imported, are left
// to runtimeSpec.
func (n *Node) fetchTemplate(ctx context.Context, name string) error {
	if n.cfg.FetchImage == nil || !strings.HasPrefix(name, importedPrefix) {
		return nil
	}
	if _, ok := n.template(name); ok {
		return nil
	}
	return n.cfg.FetchImage(ctx, name)
}

// importedPrefix begins the names of imported images (image.DirName).
const importedPrefix = "sha256-"

func (n *Node) caBundle(name string) string {
	n.tmplMu.RLock()
	defer n.tmplMu.RUnlock()
	return n.cfg.CABundles[name]
}
