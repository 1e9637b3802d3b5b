package image

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// account is a login with a group of its own, what `useradd --user-group
// --create-home` makes.
type account struct {
	Name  string
	ID    int // uid and gid
	Home  string
	Shell string
}

// subIDStart and subIDCount are Debian's defaults for the subordinate ID
// range useradd gives a new user (SUB_UID_MIN, SUB_UID_COUNT).
const (
	subIDStart = 100000
	subIDCount = 65536
)

// maxAccountFile bounds what is read of /etc/passwd and its kin.
const maxAccountFile = 1 << 20

// addAccount adds a to the tree under root the way useradd would (passwd,
// group, shadow, gshadow, subuid, subgid; a home made from /etc/skel), by
// editing the tree's files from Go. Nothing of the tree runs: setting up
// an image never executes the image's own binaries as host root. Every
// path resolves inside root (os.Root): a symlink in the tree that points
// out of it is an error, never a way to the host's files.
func addAccount(root *os.Root, a account, now time.Time) error {
	id := strconv.Itoa(a.ID)
	taken := func(name, uid string) func(fields []string) bool {
		return func(f []string) bool { return f[0] == name || (uid != "" && len(f) > 2 && f[2] == uid) }
	}
	days := strconv.FormatInt(now.Unix()/86400, 10)
	files := []struct {
		name     string
		required bool
		taken    func([]string) bool
		line     func([]byte) string
	}{
		{"etc/passwd", true, taken(a.Name, id), constLine(a.Name + ":x:" + id + ":" + id + "::" + a.Home + ":" + a.Shell)},
		{"etc/group", true, taken(a.Name, id), constLine(a.Name + ":x:" + id + ":")},
		// "!": no password; the account is entered through the agent only.
		{"etc/shadow", false, taken(a.Name, ""), constLine(a.Name + ":!:" + days + ":0:99999:7:::")},
		{"etc/gshadow", false, taken(a.Name, ""), constLine(a.Name + ":!::")},
		{"etc/subuid", false, taken(a.Name, ""), subIDLine(a.Name)},
		{"etc/subgid", false, taken(a.Name, ""), subIDLine(a.Name)},
	}
	for _, f := range files {
		if err := appendEntry(root, f.name, f.required, f.taken, f.line); err != nil {
			return fmt.Errorf("add user %s: %w", a.Name, err)
		}
	}
	if err := makeHome(root, a); err != nil {
		return fmt.Errorf("add user %s: %w", a.Name, err)
	}
	return nil
}

func constLine(s string) func([]byte) string { return func([]byte) string { return s } }

// subIDLine gives name the first subordinate range past those in use.
func subIDLine(name string) func([]byte) string {
	return func(content []byte) string {
		next := int64(subIDStart)
		for _, l := range strings.Split(string(content), "\n") {
			f := strings.Split(l, ":")
			if len(f) != 3 {
				continue
			}
			start, err1 := strconv.ParseInt(f[1], 10, 64)
			count, err2 := strconv.ParseInt(f[2], 10, 64)
			if err1 == nil && err2 == nil && start+count > next {
				next = start + count
			}
		}
		return fmt.Sprintf("%s:%d:%d", name, next, subIDCount)
	}
}

// appendEntry appends line(content) to the colon-separated file name,
// unless an entry is taken; a missing file is an error when required and
// skipped otherwise. The file is replaced atomically with the same mode and
// owner.
func appendEntry(root *os.Root, name string, required bool, taken func([]string) bool, line func([]byte) string) error {
	f, err := root.Open(name)
	if errors.Is(err, fs.ErrNotExist) && !required {
		return nil
	}
	if err != nil {
		return err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	content, err := readBounded(f, maxAccountFile)
	f.Close()
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s: not a regular file", name)
	}
	for _, l := range strings.Split(string(content), "\n") {
		if fields := strings.Split(l, ":"); l != "" && taken(fields) {
			return fmt.Errorf("%s: an entry exists: %q", name, l)
		}
	}
	if len(content) > 0 && content[len(content)-1] != '\n' {
		content = append(content, '\n')
	}
	content = append(content, line(content)+"\n"...)
	return replaceFile(root, name, content, st)
}

// replaceFile writes content to a temporary file beside name, gives it
// like's mode and owner, and renames it over name.
func replaceFile(root *os.Root, name string, content []byte, like fs.FileInfo) error {
	tmp := path.Join(path.Dir(name), "."+path.Base(name)+".cove-tmp")
	root.Remove(tmp) // left by an interrupted build
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(content)
	if err == nil {
		err = chownLike(f, like)
	}
	if err == nil {
		err = f.Chmod(like.Mode().Perm())
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = root.Rename(tmp, name)
	}
	if err != nil {
		root.Remove(tmp)
		return fmt.Errorf("replace %s: %w", name, err)
	}
	return nil
}

// makeHome creates a's home directory (its parent must exist) and copies
// /etc/skel into it, everything owned by a. Symlinks in skel are skipped.
func makeHome(root *os.Root, a account) error {
	home := strings.TrimPrefix(path.Clean(a.Home), "/")
	if err := root.Mkdir(home, 0o755); err != nil {
		return err
	}
	if err := ownDir(root, home, a.ID, 0o755); err != nil {
		return err
	}
	skel, err := root.OpenRoot("etc/skel")
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer skel.Close()
	dst, err := root.OpenRoot(home)
	if err != nil {
		return err
	}
	defer dst.Close()
	return copyTree(skel, dst, ".", a.ID)
}

// copyTree copies the directory dir of src into dst: regular files and
// directories, owned by id.
func copyTree(src, dst *os.Root, dir string, id int) error {
	d, err := src.Open(dir)
	if err != nil {
		return err
	}
	entries, err := d.ReadDir(-1)
	d.Close()
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := path.Join(dir, e.Name())
		switch {
		case e.Type().IsDir():
			info, err := e.Info()
			if err != nil {
				return err
			}
			if err := dst.Mkdir(name, 0o700); err != nil {
				return err
			}
			if err := ownDir(dst, name, id, info.Mode().Perm()); err != nil {
				return err
			}
			if err := copyTree(src, dst, name, id); err != nil {
				return err
			}
		case e.Type().IsRegular():
			if err := copySkelFile(src, dst, name, id); err != nil {
				return err
			}
		}
	}
	return nil
}

func copySkelFile(src, dst *os.Root, name string, id int) error {
	in, err := src.OpenFile(name, os.O_RDONLY|noFollow, 0)
	if err != nil {
		return err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	content, err := readBounded(in, maxAccountFile)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	out, err := dst.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|noFollow, 0o600)
	if err != nil {
		return err
	}
	_, err = out.Write(content)
	if err == nil {
		err = out.Chown(id, id)
	}
	if err == nil {
		err = out.Chmod(st.Mode().Perm())
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// ownDir gives the directory name (just made) to id with mode perm.
func ownDir(root *os.Root, name string, id int, perm fs.FileMode) error {
	if err := root.Lchown(name, id, id); err != nil {
		return err
	}
	return root.Chmod(name, perm)
}

// noFollow keeps the last element of a path from being a symlink.
const noFollow = syscall.O_NOFOLLOW

func chownLike(f *os.File, like fs.FileInfo) error {
	st, ok := like.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	return f.Chown(int(st.Uid), int(st.Gid))
}

// readBounded reads f whole, failing past max bytes.
func readBounded(f *os.File, max int64) ([]byte, error) {
	var b bytes.Buffer
	n, err := b.ReadFrom(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if n > max {
		return nil, fmt.Errorf("larger than %d bytes", max)
	}
	return b.Bytes(), nil
}
