// Command release packs what `make dist` built into dist/: for each
// architecture a cove_<version>_linux_<arch>.tar.gz and a .deb, then
// SHA256SUMS over every archive and package there.
//
//	release -tree . -out dist -version v0.1.0 -bin dist/build -arch amd64,arm64
//
// The binaries of an architecture are read from <bin>/linux_<arch>/.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cove-dev/cove/internal/release"
)

func main() {
	tree := flag.String("tree", ".", "the checkout's root")
	out := flag.String("out", "dist", "where the archives, packages and SHA256SUMS go")
	bin := flag.String("bin", "dist/build", "holds linux_<arch>/cove and cove-agent")
	version := flag.String("version", "dev", "the release's version (git describe --tags --dirty, or dev)")
	arches := flag.String("arch", "amd64,arm64", "architectures, comma separated")
	mtime := flag.Int64("mtime", 0, "seconds since the epoch given every packed file (the commit's time)")
	flag.Parse()
	if err := run(*tree, *out, *bin, *version, *arches, time.Unix(*mtime, 0).UTC()); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func run(tree, out, bin, version, arches string, mtime time.Time) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	var names []string
	for _, arch := range strings.Split(arches, ",") {
		in := release.Input{Tree: tree, BinDir: filepath.Join(bin, "linux_"+arch), Version: version, Arch: arch, MTime: mtime}
		a, err := release.Archive(out, in)
		if err != nil {
			return fmt.Errorf("archive %s: %w", arch, err)
		}
		d, err := release.Deb(out, filepath.Join(bin, "units"), in)
		if err != nil {
			return err
		}
		names = append(names, a, d)
		fmt.Printf("wrote %s\nwrote %s\n", filepath.Join(out, a), filepath.Join(out, d))
	}
	return release.Sums(out, names)
}
