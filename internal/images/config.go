package images

import (
	"bufio"
	"errors"
	"io"
	"io/fs"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/cove-dev/cove/internal/node/image"
)

// maxAccountFile bounds what is read of the image's /etc/passwd and
// /etc/group.
const maxAccountFile = 1 << 20

// configOf reads what the image says of itself, resolves its user against
// the tree's /etc/passwd and /etc/group, and finds its shell: /bin/bash,
// else /bin/sh, else none (only argv runs then).
func configOf(a Archive, root *os.Root, maxID int) (*image.Config, []string, error) {
	cf, err := a.Image.ConfigFile()
	if err != nil {
		return nil, nil, refuse("read the config: %v", err)
	}
	c := cf.Config
	cfg := &image.Config{
		Digest: a.Digest.String(), Env: nonNil(c.Env), WorkingDir: c.WorkingDir, User: c.User,
		Entrypoint: nonNil(c.Entrypoint), Cmd: nonNil(c.Cmd), Labels: maps.Clone(c.Labels),
	}
	if cfg.Labels == nil {
		cfg.Labels = map[string]string{}
	}
	if cfg.WorkingDir != "" && !strings.HasPrefix(cfg.WorkingDir, "/") {
		return nil, nil, refuse("WorkingDir %q is not an absolute path", cfg.WorkingDir)
	}
	for _, e := range cfg.Env {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" || strings.ContainsRune(e, 0) {
			return nil, nil, refuse("Env entry %q is not NAME=value", e)
		}
	}
	if cfg.UID, cfg.GID, cfg.Home, err = resolveUser(root, c.User, maxID); err != nil {
		return nil, nil, err
	}
	return cfg, shellOf(root), nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return slices.Clone(s)
}

// shellOf finds the image's shell. A symlink may point anywhere (an
// absolute target resolves in the sandbox, not here): its presence is
// enough.
func shellOf(root *os.Root) []string {
	for _, sh := range []string{"bin/bash", "usr/bin/bash", "bin/sh", "usr/bin/sh"} {
		if fi, err := root.Lstat(sh); err == nil && !fi.IsDir() {
			return []string{"/" + sh, "-c"}
		}
	}
	return nil
}

// resolveUser reads an OCI User ("", "name", "uid", either with ":group"
// or ":gid") as the image's /etc/passwd and /etc/group define them. ""
// is root, as in every OCI runtime.
func resolveUser(root *os.Root, user string, maxID int) (uid, gid int, home string, err error) {
	if user == "" {
		return 0, 0, "/root", nil
	}
	u, g, hasGroup := strings.Cut(user, ":")
	passwd := readAccounts(root, "etc/passwd")
	var entry []string
	if n, err := strconv.Atoi(u); err == nil {
		uid = n
		for _, f := range passwd {
			if len(f) >= 6 && f[2] == u {
				entry = f
				break
			}
		}
	} else {
		for _, f := range passwd {
			if len(f) >= 6 && f[0] == u {
				entry = f
				break
			}
		}
		if entry == nil {
			return 0, 0, "", refuse("its User %q is not in its /etc/passwd", u)
		}
		if uid, err = strconv.Atoi(entry[2]); err != nil {
			return 0, 0, "", refuse("its /etc/passwd gives %q the uid %q", u, entry[2])
		}
	}
	home = "/"
	if entry != nil {
		if gid, err = strconv.Atoi(entry[3]); err != nil {
			return 0, 0, "", refuse("its /etc/passwd gives %q the gid %q", u, entry[3])
		}
		if entry[5] != "" {
			home = entry[5]
		}
	} else if uid == 0 {
		home = "/root"
	}
	if hasGroup {
		if n, err := strconv.Atoi(g); err == nil {
			gid = n
		} else {
			found := false
			for _, f := range readAccounts(root, "etc/group") {
				if len(f) >= 3 && f[0] == g {
					if gid, err = strconv.Atoi(f[2]); err != nil {
						return 0, 0, "", refuse("its /etc/group gives %q the gid %q", g, f[2])
					}
					found = true
					break
				}
			}
			if !found {
				return 0, 0, "", refuse("the group of its User %q is not in its /etc/group", user)
			}
		}
	}
	if uid < 0 || gid < 0 || uid >= maxID || gid >= maxID {
		return 0, 0, "", refuse("its User %q is %d:%d; IDs must be under %d", user, uid, gid, maxID)
	}
	return uid, gid, home, nil
}

// readAccounts reads a colon-separated account file of the tree; a file
// that is absent or unreadable has no entries.
func readAccounts(root *os.Root, name string) [][]string {
	f, err := root.Open(name)
	if err != nil {
		return nil
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return nil
	}
	var out [][]string
	sc := bufio.NewScanner(io.LimitReader(f, maxAccountFile))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		out = append(out, strings.Split(line, ":"))
	}
	if err := sc.Err(); err != nil && !errors.Is(err, fs.ErrClosed) {
		return out
	}
	return out
}
