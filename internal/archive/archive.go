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
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/go-git/go-git/v5/plumbing/format/gitignore"
)

// IgnoreFile names the files of a folder whose patterns are left out of
// the folder's upload: the one at its top and any in its subfolders, as
// .gitignore files are (see Excluder).
const IgnoreFile = ".coveignore"

// Excluder decides which paths of a folder an upload leaves out. Its
// patterns follow .gitignore exactly (matched by go-git's gitignore
// package): a pattern without a slash but at its end matches a name at any
// depth (`*.pyc`); one with a slash at its start or middle is anchored to
// the folder of the file it is in (`/dist`, `build/out`); a trailing slash
// matches directories only (`cache/`); `**` matches any number of
// directories; `!` re-includes what an earlier pattern excluded, except
// inside an excluded directory, which is left out whole; `#` starts a
// comment and `\` escapes. A .coveignore in a subfolder applies below
// it, after the ones above. .coveignore files themselves are always
// uploaded. A nil Excluder excludes nothing.
type Excluder struct {
	patterns []gitignore.Pattern
}

// NewExcluder returns an Excluder with patterns, as if they were the
// first lines of the folder's top .coveignore. WriteDir adds the
// folder's .coveignore files as it meets them. A pattern whose brackets
// do not close is an error.
func NewExcluder(patterns []string) (*Excluder, error) {
	e := &Excluder{}
	if err := e.add(patterns, nil); err != nil {
		return nil, err
	}
	return e, nil
}

// add parses the lines of an ignore file in the folder domain (its path
// from the top, split at slashes).
func (e *Excluder) add(lines []string, domain []string) error {
	for _, line := range lines {
		line = strings.TrimSuffix(line, "\r")
		if strings.HasPrefix(line, "#") || strings.TrimSpace(line) == "" {
			continue
		}
		for _, seg := range strings.Split(strings.TrimPrefix(line, "!"), "/") {
			if _, err := path.Match(seg, ""); err != nil {
				return fmt.Errorf("exclude pattern %q: %v", line, err)
			}
		}
		e.patterns = append(e.patterns, gitignore.ParsePattern(line, domain))
	}
	return nil
}

// AddFile adds the patterns of an ignore file as if it were at the top of
// the folder; a missing file adds none.
func (e *Excluder) AddFile(name string) error { return e.addFile(name, nil) }

func (e *Excluder) addFile(name string, domain []string) error {
	b, err := os.ReadFile(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := e.add(strings.Split(string(b), "\n"), domain); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// Excluded reports whether rel (slash-separated, relative to the folder)
// is left out, by the patterns added so far. It does not look at rel's
// parents: a walk skips an excluded directory whole.
func (e *Excluder) Excluded(rel string, dir bool) bool {
	if e == nil || !dir && path.Base(rel) == IgnoreFile {
		return false
	}
	return gitignore.NewMatcher(e.patterns).Match(strings.Split(rel, "/"), dir)
}

// withFolder returns a copy of e that goes on to read the .coveignore
// files of the folder it walks; nil stays nil.
func (e *Excluder) withFolder() *Excluder {
	if e == nil {
		return nil
	}
	return &Excluder{patterns: slices.Clip(slices.Clone(e.patterns))}
}

// enter adds the .coveignore of the folder dir at rel ("" for the top).
func (e *Excluder) enter(dir, rel string) error {
	if e == nil {
		return nil
	}
	var domain []string
	if rel != "" {
		domain = strings.Split(rel, "/")
	}
	return e.addFile(filepath.Join(dir, IgnoreFile), domain)
}
