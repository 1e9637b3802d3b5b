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

// AddNodeSeededNoWait starts a node that joins with the fleet's token
// after seed filled its (new) data dir, and returns at once: a test of a
// join made with what another host left there.
func (f *Fleet) AddNodeSeededNoWait(name string, seed func(dataDir string)) *Node {
	f.t.Helper()
	n := f.newNode(name, imagesDir, f.JoinTokenFile())
	seed(n.DataDir)
	if err := n.StartNoWait(); err != nil {
		f.t.Fatal(err)
	}
	return n
}
