// Package archive packs folders into tar.gz streams and unpacks them, for
// every side of cove that moves a folder as one stream outside the control
// plane: the CLI (`cove files put -r` and `get -r`) and the node (a git
// clone handed to its sandbox). The public Go SDK (sdk/go) keeps its own
// copy of the packer and the Excluder for its users, since it is a module
// of its own; a test here keeps the two alike.
//
// What is packed: regular files with their permission bits, directories
// (empty ones too) and symlinks (as links, never what they point at),
// named relative to the folder, owners left out. Other types (sockets,
// devices, FIFOs) are skipped. What is unpacked never leaves the folder:
// absolute names, `..`, symlinks leading out and paths through symlinks
// are refused, and only directories, regular files and symlinks are made.
package archive

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"
)

// IgnoreFile is the file at the top of a folder whose patterns are left
// out of the folder's upload, one per line (see Excluder).
const IgnoreFile = ".coveignore"

// Excluder decides which paths of a folder an upload leaves out, by
// patterns like .gitignore's: a pattern without a slash matches a name at
// any depth (`*.pyc`, `node_modules`); one with a slash matches the path
// from the top of the folder (`build/out`, `/dist`); a trailing slash
// matches directories only (`cache/`); `**/` at the start matches at any
// depth. `*`, `?` and `[…]` are path.Match's. Lines starting with `#` and
// empty lines are skipped. An excluded directory is left out whole. A nil
// Excluder excludes nothing.
type Excluder struct {
	patterns []pattern
}

type pattern struct {
	glob     string
	anchored bool // matched against the whole relative path
	dirOnly  bool
}

// NewExcluder parses patterns; an invalid one is an error.
func NewExcluder(patterns []string) (*Excluder, error) {
	e := &Excluder{}
	for _, p := range patterns {
		if err := e.add(p); err != nil {
			return nil, err
		}
	}
	return e, nil
}

func (e *Excluder) add(line string) error {
	p := strings.TrimSpace(line)
	if p == "" || strings.HasPrefix(p, "#") {
		return nil
	}
	if strings.HasPrefix(p, "!") {
		return fmt.Errorf("exclude pattern %q: negation (!) is not supported", line)
	}
	var pt pattern
	if strings.HasSuffix(p, "/") {
		pt.dirOnly = true
		p = strings.TrimRight(p, "/")
	}
	p = strings.TrimPrefix(p, "**/")
	if strings.Contains(p, "/") {
		pt.anchored = true
		p = strings.TrimPrefix(p, "/")
	}
	if p == "" {
		return fmt.Errorf("exclude pattern %q matches nothing", line)
	}
	if _, err := path.Match(p, ""); err != nil {
		return fmt.Errorf("exclude pattern %q: %v", line, err)
	}
	pt.glob = p
	e.patterns = append(e.patterns, pt)
	return nil
}

// AddFile adds the patterns of an ignore file; a missing file adds none.
func (e *Excluder) AddFile(name string) error {
	f, err := os.Open(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if err := e.add(sc.Text()); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return sc.Err()
}

// Excluded reports whether rel (slash-separated, relative to the folder)
// is left out.
func (e *Excluder) Excluded(rel string, dir bool) bool {
	if e == nil {
		return false
	}
	base := path.Base(rel)
	for _, p := range e.patterns {
		if p.dirOnly && !dir {
			continue
		}
		target := base
		if p.anchored {
			target = rel
		}
		if ok, _ := path.Match(p.glob, target); ok {
			return true
		}
	}
	return false
}
