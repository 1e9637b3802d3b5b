// Package release packs built binaries into what a release ships: a
// versioned tar.gz and a .deb per architecture, and a SHA256SUMS over them.
// `make dist` builds the binaries and runs cmd/release; the .deb is written
// with nfpm, so packing needs no tool besides Go.
package release

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/goreleaser/nfpm/v2"
	_ "github.com/goreleaser/nfpm/v2/deb" // registers the deb packager
	"github.com/goreleaser/nfpm/v2/files"
)

// Units are the systemd units deploy/systemd holds, packed in both forms.
var Units = []string{"cove.service", "cove-control.service", "cove-node.service"}

// Depends are the Debian packages cove needs at run time: the Makefile's
// DEB_PACKAGES (runc, nftables, the image tools), which `make deps` installs
// for a checkout.
var Depends = []string{
	"runc", "nftables", "debootstrap", "debian-archive-keyring", "busybox-static",
	"e2fsprogs", "iproute2", "util-linux", "ca-certificates",
}

// Docs are the files of the tree installed under /usr/share/doc/cove and
// put at the top of the archive, where they exist.
var Docs = []string{"LICENSE", "README.md", "CHANGELOG.md", "docs/operations.md", "docs/fleet.md"}

// ExampleConfig is the commented example configuration, relative to the
// tree; the .deb installs it as the conffile /etc/cove/cove.toml.
const ExampleConfig = "deploy/cove.toml"

// Input is one architecture's build: the tree it came from and the
// directory holding its cove and cove-agent.
type Input struct {
	Tree    string    // checkout root
	BinDir  string    // holds cove and cove-agent, built for Arch
	Version string    // as `git describe` gives it, or "dev"
	Arch    string    // Go and Debian name alike: amd64, arm64
	MTime   time.Time // every packed file's time, so packing is repeatable
}

// Base is the name archives are given, without extension:
// cove_<version>_linux_<arch>.
func (in Input) Base() string {
	return fmt.Sprintf("cove_%s_linux_%s", in.Version, in.Arch)
}

// DebVersion is Version in the form dpkg accepts: a leading "v" of a tag
// dropped, and "0~" before a version that does not start with a digit
// (dev, a bare commit), so any release sorts before 0.0.1.
func DebVersion(v string) string {
	if len(v) > 1 && v[0] == 'v' && v[1] >= '0' && v[1] <= '9' {
		v = v[1:]
	}
	if v == "" || v[0] < '0' || v[0] > '9' {
		v = "0~" + v
	}
	return strings.ReplaceAll(v, "_", "~")
}

// UnitFor is a unit's text with the paths `make install` uses
// (/usr/local/bin, /usr/local/share/doc) rewritten to prefix.
func UnitFor(text, prefix string) string {
	r := strings.NewReplacer("/usr/local/bin/cove", prefix+"/bin/cove",
		"/usr/local/share/doc/cove", prefix+"/share/doc/cove")
	return r.Replace(text)
}

// entry is one file of a package: where it comes from, where it goes.
type entry struct {
	src, dst string
	mode     os.FileMode
}

func (in Input) docs() []entry {
	var es []entry
	for _, d := range Docs {
		if _, err := os.Stat(filepath.Join(in.Tree, d)); err == nil {
			es = append(es, entry{filepath.Join(in.Tree, d), filepath.Base(d), 0o644})
		}
	}
	return es
}

// Archive writes dir/<Base>.tar.gz: one top directory <Base> holding cove,
// cove-agent, the docs, deploy/cove.toml and deploy/systemd/*.service (as
// `make install` expects them, running /usr/local/bin/cove). It returns the
// file's name.
func Archive(dir string, in Input) (string, error) {
	es := []entry{
		{filepath.Join(in.BinDir, "cove"), "cove", 0o755},
		{filepath.Join(in.BinDir, "cove-agent"), "cove-agent", 0o755},
		{filepath.Join(in.Tree, ExampleConfig), ExampleConfig, 0o644},
	}
	es = append(es, in.docs()...)
	for _, u := range Units {
		es = append(es, entry{filepath.Join(in.Tree, "deploy", "systemd", u), "deploy/systemd/" + u, 0o644})
	}
	name := in.Base() + ".tar.gz"
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		return "", err
	}
	defer f.Close()
	gz := gzip.NewWriter(f)
	tw := tar.NewWriter(gz)
	dirs := map[string]bool{}
	for _, e := range es {
		for _, d := range parents(in.Base() + "/" + e.dst) {
			if dirs[d] {
				continue
			}
			dirs[d] = true
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: in.MTime, Format: tar.FormatPAX}); err != nil {
				return "", err
			}
		}
		if err := addFile(tw, e.src, in.Base()+"/"+e.dst, e.mode, in.MTime); err != nil {
			return "", err
		}
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	if err := gz.Close(); err != nil {
		return "", err
	}
	return name, f.Close()
}

// parents are the directories above a slash path, outermost first.
func parents(p string) []string {
	var ds []string
	for d := filepath.Dir(p); d != "." && d != "/"; d = filepath.Dir(d) {
		ds = append(ds, d)
	}
	slices.Reverse(ds)
	return ds
}

func addFile(tw *tar.Writer, src, name string, mode os.FileMode, mtime time.Time) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: int64(mode), Size: st.Size(), ModTime: mtime, Format: tar.FormatPAX}); err != nil {
		return err
	}
	_, err = io.Copy(tw, f)
	return err
}

// Deb writes dir/cove_<debversion>_<arch>.deb. It installs cove and
// cove-agent in /usr/bin, the units in /lib/systemd/system running
// /usr/bin/cove, the example config as the conffile /etc/cove/cove.toml and
// the docs in /usr/share/doc/cove. work is a scratch directory for the
// rewritten units. It returns the file's name.
func Deb(dir, work string, in Input) (string, error) {
	contents := files.Contents{
		{Source: filepath.Join(in.BinDir, "cove"), Destination: "/usr/bin/cove", FileInfo: &files.ContentFileInfo{Mode: 0o755, MTime: in.MTime}},
		{Source: filepath.Join(in.BinDir, "cove-agent"), Destination: "/usr/bin/cove-agent", FileInfo: &files.ContentFileInfo{Mode: 0o755, MTime: in.MTime}},
		{Source: filepath.Join(in.Tree, ExampleConfig), Destination: "/etc/cove/cove.toml", Type: files.TypeConfigNoReplace, FileInfo: &files.ContentFileInfo{Mode: 0o644, MTime: in.MTime}},
	}
	for _, d := range in.docs() {
		contents = append(contents, &files.Content{Source: d.src, Destination: "/usr/share/doc/cove/" + d.dst, FileInfo: &files.ContentFileInfo{Mode: 0o644, MTime: in.MTime}})
	}
	if err := os.MkdirAll(work, 0o755); err != nil {
		return "", err
	}
	for _, u := range Units {
		b, err := os.ReadFile(filepath.Join(in.Tree, "deploy", "systemd", u))
		if err != nil {
			return "", err
		}
		p := filepath.Join(work, u)
		if err := os.WriteFile(p, []byte(UnitFor(string(b), "/usr")), 0o644); err != nil {
			return "", err
		}
		contents = append(contents, &files.Content{Source: p, Destination: "/lib/systemd/system/" + u, FileInfo: &files.ContentFileInfo{Mode: 0o644, MTime: in.MTime}})
	}
	info := nfpm.WithDefaults(&nfpm.Info{
		Name:          "cove",
		Arch:          in.Arch,
		Platform:      "linux",
		Version:       DebVersion(in.Version),
		VersionSchema: "none",
		Section:       "admin",
		Priority:      "optional",
		Maintainer:    "cove maintainers <cove@localhost>",
		Description:   "Sandboxes for AI agents\nA service that runs isolated Linux sandboxes (runc, overlayfs, nftables)\nand serves an HTTP API, a console and SDKs to drive them.",
		License:       "Apache-2.0",
		MTime:         in.MTime,
		Overridables: nfpm.Overridables{
			Depends:  Depends,
			Contents: contents,
		},
	})
	if err := nfpm.PrepareForPackager(info, "deb"); err != nil {
		return "", err
	}
	pk, err := nfpm.Get("deb")
	if err != nil {
		return "", err
	}
	name := fmt.Sprintf("cove_%s_%s.deb", DebVersion(in.Version), in.Arch)
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		return "", err
	}
	defer f.Close()
	if err := pk.Package(info, f); err != nil {
		return "", fmt.Errorf("deb %s: %w", in.Arch, err)
	}
	return name, f.Close()
}

// Sums writes dir/SHA256SUMS over names, in the format sha256sum -c reads.
func Sums(dir string, names []string) error {
	var b strings.Builder
	for _, n := range slices.Sorted(slices.Values(names)) {
		f, err := os.Open(filepath.Join(dir, n))
		if err != nil {
			return err
		}
		h := sha256.New()
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s  %s\n", hex.EncodeToString(h.Sum(nil)), n)
	}
	return os.WriteFile(filepath.Join(dir, "SHA256SUMS"), []byte(b.String()), 0o644)
}
