package service

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cove-dev/cove/internal/node/image"
	"github.com/cove-dev/cove/internal/node/runtime"
)

// DefaultCACerts is Debian's directory of the CA certificates an operator
// adds to the host, what update-ca-certificates reads: *.crt files, in
// subdirectories too.
const DefaultCACerts = "/usr/local/share/ca-certificates"

// NoCACerts as Config.CACerts gives sandboxes no operator certificates.
const NoCACerts = "none"

// Bounds on what is read: the operator's files, and an image's bundle
// (Debian's is about 200 KiB).
const (
	maxCAFile       = 1 << 20
	maxCACerts      = 4096
	maxImageBundle  = 16 << 20
	caBundlesSubdir = "ca"
	// sandboxCABundlesSubdir holds the bundles of sandboxes with
	// injection rules: their template's plus their gateway CA.
	sandboxCABundlesSubdir = "ca-sandboxes"
)

// loadCACerts reads the CA certificates the operator trusts from path: a
// PEM file, or a directory of *.crt PEM files (subdirectories included).
// NoCACerts is none, and so is DefaultCACerts when it does not exist. It
// returns the certificates PEM-encoded and how many there are. Every block
// must be a certificate that parses: a private key left there by mistake
// is refused rather than copied into every sandbox.
func loadCACerts(path string) ([]byte, int, error) {
	if path == "" || path == NoCACerts {
		return nil, 0, nil
	}
	st, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) && path == DefaultCACerts {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("CA certificates: %w", err)
	}
	files := []string{path}
	if st.IsDir() {
		files = nil
		err := filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.IsDir() && strings.HasSuffix(d.Name(), ".crt") {
				files = append(files, p)
			}
			return nil
		})
		if err != nil {
			return nil, 0, fmt.Errorf("CA certificates: %w", err)
		}
		slices.Sort(files)
	}
	var out bytes.Buffer
	n := 0
	for _, f := range files {
		b, err := readCAFile(f)
		if err != nil {
			return nil, 0, fmt.Errorf("CA certificates: %w", err)
		}
		found := 0
		for {
			var block *pem.Block
			block, b = pem.Decode(b)
			if block == nil {
				break
			}
			if block.Type != "CERTIFICATE" {
				return nil, 0, fmt.Errorf("CA certificates: %s holds a %q block; only certificates are given to sandboxes", f, block.Type)
			}
			if _, err := x509.ParseCertificate(block.Bytes); err != nil {
				return nil, 0, fmt.Errorf("CA certificates: %s: %w", f, err)
			}
			if n++; n > maxCACerts {
				return nil, 0, fmt.Errorf("CA certificates: more than %d", maxCACerts)
			}
			found++
			pem.Encode(&out, &pem.Block{Type: "CERTIFICATE", Bytes: block.Bytes})
		}
		if found == 0 {
			return nil, 0, fmt.Errorf("CA certificates: %s holds no PEM certificate", f)
		}
	}
	return out.Bytes(), n, nil
}

func readCAFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil {
		return nil, err
	} else if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxCAFile+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxCAFile {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, maxCAFile)
	}
	return b, nil
}

// writeCABundles writes into dir, for each template whose image has a
// system CA bundle (runtime.CABundlePath), that bundle followed by extra,
// and returns their paths by template. The runtime binds them read-only
// over the image's bundle. Bundles of an earlier start are removed first
// (running sandboxes keep the files they have mounted); without extra
// there are none. The files hold only public certificates: 0644 in a dir
// that the sandboxes' mapped root can pass (0711).
func writeCABundles(dir string, templates map[string]image.Image, extra []byte, log *slog.Logger) (map[string]string, error) {
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("remove old CA bundles: %w", err)
	}
	if len(extra) == 0 {
		return nil, nil
	}
	if err := os.Mkdir(dir, 0o711); err != nil {
		return nil, fmt.Errorf("CA bundles: %w", err)
	}
	if err := os.Chmod(dir, 0o711); err != nil {
		return nil, fmt.Errorf("CA bundles: %w", err)
	}
	bundles := map[string]string{}
	for name, img := range templates {
		p, err := writeCABundle(dir, name, img, extra, log)
		if err != nil {
			return nil, err
		}
		if p != "" {
			bundles[name] = p
		}
	}
	return bundles, nil
}

// writeCABundle writes one image's bundle plus extra into dir and returns
// its path; "" when the image has no bundle or there is no extra.
func writeCABundle(dir, name string, img image.Image, extra []byte, log *slog.Logger) (string, error) {
	if len(extra) == 0 {
		return "", nil
	}
	base, err := img.ReadFile(runtime.CABundlePath, maxImageBundle)
	if errors.Is(err, fs.ErrNotExist) {
		log.Info("the image has no CA bundle: its sandboxes do not get the operator's CA certificates",
			"template", name, "bundle", runtime.CABundlePath)
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("CA bundle of image %s: %w", name, err)
	}
	if len(base) > 0 && base[len(base)-1] != '\n' {
		base = append(base, '\n')
	}
	p := filepath.Join(dir, name+".crt")
	if err := writePublicFile(p, append(base, extra...)); err != nil {
		return "", fmt.Errorf("CA bundle of image %s: %w", name, err)
	}
	return p, nil
}

// writePublicFile writes path atomically with mode 0644.
func writePublicFile(path string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // a no-op after the rename
	_, err = tmp.Write(b)
	if err == nil {
		err = tmp.Chmod(0o644)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
