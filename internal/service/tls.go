package service

import (
	"crypto/tls"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/cove-dev/cove/internal/certreload"
)

// loadTLS is the TLS configuration serving files (reloaded when they
// change), nil when none are set.
func loadTLS(files TLSFiles, log *slog.Logger) (*tls.Config, error) {
	if !files.On() {
		return nil, nil
	}
	p, err := certreload.Load(files.Cert, files.Key, log)
	if err != nil {
		return nil, err
	}
	return p.ServerConfig(), nil
}

// serveHTTP serves ln over TLS (HTTP/2 offered) when hs has a TLS
// configuration, else in plain HTTP.
func serveHTTP(hs *http.Server, ln net.Listener) error {
	if hs.TLSConfig != nil {
		return hs.ServeTLS(ln, "", "")
	}
	return hs.Serve(ln)
}

// warnPlain warns, at start, of a listener reachable beyond this host
// that speaks plain HTTP: keys and files cross the network in clear, and
// browsers deny the console WebCrypto on such an origin.
func warnPlain(log *slog.Logger, name string, ln net.Listener, tc *tls.Config, flags string) {
	if tc != nil || isLoopback(ln.Addr()) {
		return
	}
	log.Warn("listener reachable beyond this host serves plain HTTP; set "+flags+" (or put a TLS-terminating proxy in front and set --public-url)", "listener", name, "addr", ln.Addr().String())
}

func isLoopback(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}

// PublicURL is the API's URL as clients reach it: cfg.PublicURL when set,
// else the scheme its TLS files say and the address bound (an unspecified
// address reached on loopback).
func PublicURL(cfg Config, apiAddr string) string {
	if cfg.PublicURL != "" {
		return strings.TrimSuffix(cfg.PublicURL, "/")
	}
	scheme := "http"
	if cfg.TLS.On() {
		scheme = "https"
	}
	if host, port, err := net.SplitHostPort(apiAddr); err == nil {
		if ip, err := netip.ParseAddr(host); err == nil && ip.IsUnspecified() {
			host = "127.0.0.1"
		}
		apiAddr = net.JoinHostPort(host, port)
	}
	return scheme + "://" + apiAddr
}
