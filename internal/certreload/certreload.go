// Package certreload serves a TLS certificate and key kept in files,
// reloading them when either file changes: each handshake stats both files
// (cheap) and reads them again only when a size or modification time
// moved. A new pair that does not load keeps the old one served, and is
// logged once per change.
package certreload

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// Pair is a certificate file and its key file, reloaded when they change.
type Pair struct {
	cert, key string
	log       *slog.Logger

	mu      sync.Mutex
	current *tls.Certificate
	seen    stamp // the files' state when last read (loaded or not)
}

// stamp is what a stat tells of both files.
type stamp struct {
	certSize, keySize int64
	certMod, keyMod   time.Time
}

// Load reads the pair a first time; a pair that does not load is an error
// naming both files.
func Load(certFile, keyFile string, log *slog.Logger) (*Pair, error) {
	p := &Pair{cert: certFile, key: keyFile, log: log}
	st, err := p.stat()
	if err != nil {
		return nil, err
	}
	c, err := p.read()
	if err != nil {
		return nil, err
	}
	p.current, p.seen = c, st
	return p, nil
}

func (p *Pair) stat() (stamp, error) {
	ci, err := os.Stat(p.cert)
	if err != nil {
		return stamp{}, err
	}
	ki, err := os.Stat(p.key)
	if err != nil {
		return stamp{}, err
	}
	return stamp{ci.Size(), ki.Size(), ci.ModTime(), ki.ModTime()}, nil
}

func (p *Pair) read() (*tls.Certificate, error) {
	c, err := tls.LoadX509KeyPair(p.cert, p.key)
	if err != nil {
		return nil, fmt.Errorf("TLS certificate %s and key %s: %w", p.cert, p.key, err)
	}
	if c.Leaf == nil && len(c.Certificate) > 0 {
		if c.Leaf, err = x509.ParseCertificate(c.Certificate[0]); err != nil {
			return nil, fmt.Errorf("TLS certificate %s: %w", p.cert, err)
		}
	}
	return &c, nil
}

// Certificate is the pair to serve now, read again first when the files
// changed since they were last read.
func (p *Pair) Certificate() *tls.Certificate {
	p.mu.Lock()
	defer p.mu.Unlock()
	st, err := p.stat()
	if err != nil {
		if p.seen != (stamp{}) {
			p.log.Error("TLS certificate files unreadable; serving the last pair loaded", "cert", p.cert, "key", p.key, "err", err)
			p.seen = stamp{}
		}
		return p.current
	}
	if st == p.seen {
		return p.current
	}
	p.seen = st
	c, err := p.read()
	if err != nil {
		p.log.Error("the changed TLS certificate does not load; serving the last pair loaded", "err", err)
		return p.current
	}
	p.current = c
	p.log.Info("TLS certificate reloaded", "cert", p.cert, "subject", c.Leaf.Subject.String(), "not_after", c.Leaf.NotAfter)
	return c
}

// GetCertificate is for tls.Config.GetCertificate.
func (p *Pair) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if c := p.Certificate(); c != nil {
		return c, nil
	}
	return nil, errors.New("no TLS certificate")
}

// ServerConfig is a server's TLS configuration serving p, with HTTP/2
// offered first (http.Server.ServeTLS adds it as well).
func (p *Pair) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: p.GetCertificate,
		NextProtos:     []string{"h2", "http/1.1"},
	}
}
