package local

import "github.com/cove-dev/cove/internal/node/image"

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
	defer n.tmplMu.RUnlock()
	img, ok := n.cfg.Templates[name]
	return img, ok
}

func (n *Node) caBundle(name string) string {
	n.tmplMu.RLock()
	defer n.tmplMu.RUnlock()
	return n.cfg.CABundles[name]
}
