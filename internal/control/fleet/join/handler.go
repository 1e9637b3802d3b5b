package join

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/fleet/fleetwire"
	"github.com/cove-dev/cove/internal/fleet/pki"
)

// Handler serves the node listener's calls. It must be served with
// ListenerTLS: a request that did not come over TLS is refused.
func (s *Service) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+fleetwire.PathJoin, s.serve(s.join))
	mux.HandleFunc("POST "+fleetwire.PathRegister, s.serve(s.asNode(s.register)))
	mux.HandleFunc("POST "+fleetwire.PathRenew, s.serve(s.asNode(s.renew)))
	mux.HandleFunc("POST "+fleetwire.PathHeartbeat, s.serve(s.asNode(s.heartbeat)))
	mux.HandleFunc("/", s.serve(func(w http.ResponseWriter, r *http.Request) (any, error) {
		return nil, api.Errorf(api.CodeNotFound, "no such endpoint: %s %s", r.Method, r.URL.Path)
	}))
	return mux
}

type handlerFunc func(w http.ResponseWriter, r *http.Request) (any, error)

// nodeFunc is a call made by a node with its certificate: nodeID is the
// one its certificate names.
type nodeFunc func(r *http.Request, nodeID string) (any, error)

// serve writes a handler's answer or its error.
func (s *Service) serve(h handlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var (
			v   any
			err error
		)
		if r.TLS == nil {
			err = api.Errorf(api.CodePermissionDenied, "the node listener takes TLS only")
		} else {
			v, err = h(w, r)
		}
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_ = json.NewEncoder(w).Encode(v) // the peer went away: nothing to tell it
	}
}

// asNode refuses a call without a node's certificate, and one from a
// removed node.
func (s *Service) asNode(h nodeFunc) handlerFunc {
	return func(_ http.ResponseWriter, r *http.Request) (any, error) {
		uri := pki.PeerIdentity(r.TLS)
		id, ok := strings.CutPrefix(uri, fleetwire.NodeURIPrefix)
		if !ok || !isNodeURI(uri) {
			return nil, api.Errorf(api.CodeUnauthenticated, "this call needs a node certificate of this fleet")
		}
		if err := s.d.Registry.Allowed(r.Context(), id); err != nil {
			return nil, err
		}
		return h(r, id)
	}
}

func (s *Service) join(_ http.ResponseWriter, r *http.Request) (any, error) {
	var req fleetwire.JoinRequest
	if err := decode(r, &req); err != nil {
		return nil, err
	}
	if err := s.checkToken(r.Context(), req.Token); err != nil {
		s.d.Log.Warn("join refused", "name", req.Name, "remote", r.RemoteAddr, "err", err)
		return nil, err
	}
	if _, err := pki.ParseCSR([]byte(req.CSR)); err != nil {
		return nil, api.Errorf(api.CodeInvalidArgument, "%v", err)
	}
	hash := ""
	if req.Nonce != "" {
		nonce, err := pki.ParseJoinNonce(req.Nonce)
		if err != nil {
			return nil, api.Errorf(api.CodeInvalidArgument, "nonce: %v", err)
		}
		hash = pki.HashJoinNonce(nonce)
	}
	adm, err := s.d.Registry.Join(r.Context(), hash, req.Registration)
	if err != nil {
		if api.ErrorCode(err) == api.CodeConflict {
			s.d.Log.Warn("join refused", "name", req.Name, "remote", r.RemoteAddr, "err", err)
		}
		return nil, err
	}
	if adm.Certificate, err = s.issue(req.CSR, adm.NodeID); err != nil {
		return nil, err
	}
	s.d.Log.Info("node joined", "node", adm.NodeID, "name", req.Name, "epoch", adm.Epoch)
	return s.complete(adm), nil
}

// checkToken admits a join token: of this CA, the current one, not
// expired. Every refusal looks the same to the caller.
func (s *Service) checkToken(ctx context.Context, text string) error {
	refused := api.Errorf(api.CodeUnauthenticated, "the join token is not valid (wrong, expired or rotated)")
	t, err := pki.ParseToken(text)
	if err != nil || t.Fingerprint != s.ca.Fingerprint() {
		return refused
	}
	rec, err := s.tokenRecord(ctx)
	if api.ErrorCode(err) == api.CodeNotFound {
		return refused
	}
	if err != nil {
		return err
	}
	if !pki.SameHash(rec.Hash, t.Hash()) || !s.d.Now().Before(rec.Expires) {
		return refused
	}
	return nil
}

func (s *Service) register(r *http.Request, nodeID string) (any, error) {
	var reg fleetwire.Registration
	if err := decode(r, &reg); err != nil {
		return nil, err
	}
	if reg.CSR != "" {
		if _, err := pki.ParseCSR([]byte(reg.CSR)); err != nil {
			return nil, api.Errorf(api.CodeInvalidArgument, "%v", err)
		}
	}
	adm, err := s.d.Registry.Register(r.Context(), nodeID, reg)
	if err != nil {
		return nil, err
	}
	if adm.NodeID != nodeID {
		return nil, errors.New("join: the registry answered for another node")
	}
	if reg.CSR != "" {
		if adm.Certificate, err = s.issue(reg.CSR, nodeID); err != nil {
			return nil, err
		}
	}
	return s.complete(adm), nil
}

func (s *Service) renew(r *http.Request, nodeID string) (any, error) {
	var req fleetwire.RenewRequest
	if err := decode(r, &req); err != nil {
		return nil, err
	}
	if _, err := pki.ParseCSR([]byte(req.CSR)); err != nil {
		return nil, api.Errorf(api.CodeInvalidArgument, "%v", err)
	}
	c, err := s.issue(req.CSR, nodeID)
	if err != nil {
		return nil, err
	}
	return fleetwire.RenewAnswer{Certificate: c}, nil
}

func (s *Service) heartbeat(r *http.Request, nodeID string) (any, error) {
	var hb fleetwire.Heartbeat
	if err := decode(r, &hb); err != nil {
		return nil, err
	}
	return s.d.Registry.Heartbeat(r.Context(), nodeID, hb)
}

// issue certifies a CSR as the node with that ID.
func (s *Service) issue(csr, nodeID string) (string, error) {
	p, err := s.ca.Issue([]byte(csr), fleetwire.NodeURI(nodeID), s.cfg.CertTTL, s.d.Now())
	if err != nil {
		return "", api.Errorf(api.CodeInvalidArgument, "%v", err)
	}
	return string(p), nil
}

// complete adds what this listener owns to the registry's admission.
func (s *Service) complete(adm fleetwire.Admission) fleetwire.Admission {
	adm.CA = string(s.ca.CertPEM())
	adm.HeartbeatMS = s.cfg.HeartbeatInterval.Milliseconds()
	if adm.Assigned == nil {
		adm.Assigned = []string{}
	}
	return adm
}

func decode(r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, maxBody))
	if err := dec.Decode(v); err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return api.Errorf(api.CodePayloadTooLarge, "request body is larger than %d bytes", maxBody)
		}
		return api.Errorf(api.CodeInvalidArgument, "request body is not the JSON expected: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return api.Errorf(api.CodeInvalidArgument, "request body has data after the JSON object")
	}
	return nil
}

// statusOf maps the codes this listener answers to HTTP statuses, as
// httpapi's table does; nodes read the code from the body.
var statusOf = map[api.Code]int{
	api.CodeInvalidArgument:  http.StatusBadRequest,
	api.CodeUnauthenticated:  http.StatusUnauthorized,
	api.CodePermissionDenied: http.StatusForbidden,
	api.CodeNotFound:         http.StatusNotFound,
	api.CodeConflict:         http.StatusConflict,
	api.CodePayloadTooLarge:  http.StatusRequestEntityTooLarge,
	api.CodeUnavailable:      http.StatusServiceUnavailable,
}

func (s *Service) writeError(w http.ResponseWriter, r *http.Request, err error) {
	var e *api.Error
	if !errors.As(err, &e) {
		s.d.Log.Error("node listener", "path", r.URL.Path, "err", err)
		e = &api.Error{Code: api.CodeInternal, Message: "internal error"}
	}
	status, ok := statusOf[e.Code]
	if !ok {
		status = http.StatusInternalServerError
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(api.ErrorResponse{Error: e})
}

// Serve serves the node listener on ln with ListenerTLS until ctx ends,
// then closes it and its connections (a node's call cut short is retried
// by the node). Plain HTTP on ln is answered by the TLS
// server's 400 and never reaches a handler.
func (s *Service) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           s.Handler(),
		TLSConfig:         s.ListenerTLS(),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(s.d.Log.Handler(), slog.LevelDebug),
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		select {
		case <-ctx.Done():
			_ = srv.Close()
		case <-done:
		}
	}()
	err := srv.ServeTLS(ln, "", "")
	close(done)
	<-stopped
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}
