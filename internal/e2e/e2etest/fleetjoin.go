package e2etest

import "strings"

// AddNodeVia starts a node that joins the fleet with --control controls
// (https://HOST:PORT each, tried in order) instead of every replica's node
// listener, and waits for its ready file.
func (f *Fleet) AddNodeVia(name string, controls []string, args ...string) *Node {
	f.t.Helper()
	n := f.newNode(name, imagesDir, f.JoinTokenFile(), args...)
	for i, a := range n.Args {
		if a == "--control" && i+1 < len(n.Args) {
			n.Args[i+1] = strings.Join(controls, ",")
			break
		}
	}
	n.Start()
	return n
}
