package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/assets"
	"github.com/cove-dev/cove/internal/control/uploads"
)

// spoolingAssets receives an asset's body through a real upload ledger,
// as the asset service does.
type spoolingAssets struct {
	*fakeControlPlane
	ledger *uploads.Ledger
}

func (a *spoolingAssets) CreateAsset(ctx context.Context, teamID string, req assets.Upload, body io.Reader) (api.Asset, bool, error) {
	u, err := a.ledger.Begin(teamID, nil)
	if err != nil {
		return api.Asset{}, false, err
	}
	defer u.End()
	sp, err := a.ledger.Spool(ctx, u, body, 1<<30, req.SHA256, req.Trailer, "asset")
	if err != nil {
		return api.Asset{}, false, err
	}
	defer sp.Close()
	return api.Asset{ID: "ast_1", TeamID: teamID, Size: sp.Size, SHA256: sp.SHA256}, true, nil
}

// pipeListener serves connections made of net.Pipe, so that a server and
// its clients live in one synctest bubble.
type pipeListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }

func (l *pipeListener) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, s := net.Pipe()
	select {
	case l.conns <- s:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// TestUploadIdleCut: an upload whose body sends nothing for the idle
// timeout is cut then, not before (400 naming the timeout), and leaves
// nothing behind: its team's slot is free and its spool file is gone.
// The clock is synctest's: the test does not wait 30 s.
func TestUploadIdleCut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const idle = 30 * time.Second
		dir := t.TempDir()
		ledger := uploads.New(uploads.Config{MaxPerTeam: 1, Dir: dir}, nil)
		f := newFake()
		h := newHandler(f, slog.New(slog.DiscardHandler))
		h.Assets = &spoolingAssets{fakeControlPlane: f, ledger: ledger}
		h.LimitUploads(idle)
		ln := newPipeListener()
		srv := &http.Server{Handler: h}
		served := make(chan struct{})
		go func() {
			defer close(served)
			srv.Serve(ln)
		}()
		tr := &http.Transport{DialContext: ln.dial}
		client := &http.Client{Transport: tr}
		defer func() {
			tr.CloseIdleConnections()
			srv.Close()
			<-served
		}()

		pr, pw := io.Pipe()
		defer pw.Close()
		go pw.Write(bytes.Repeat([]byte("z"), 4<<10)) // then nothing
		req, err := http.NewRequest(http.MethodPost, "http://cove/v1/assets", pr)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+keyA)
		start := time.Now()
		type answer struct {
			resp *http.Response
			err  error
		}
		answered := make(chan answer, 1)
		go func() {
			resp, err := client.Do(req)
			answered <- answer{resp, err}
		}()

		time.Sleep(idle - time.Second)
		synctest.Wait()
		select {
		case a := <-answered:
			t.Fatalf("the upload was answered %s after its last byte, before the idle timeout: %v", time.Since(start), a.err)
		default:
		}
		if n := ledger.Open(teamA); n != 1 {
			t.Fatalf("while the body is silent: %d uploads open; want 1", n)
		}

		a := <-answered
		if a.err != nil {
			t.Fatal(a.err)
		}
		defer a.resp.Body.Close()
		if d := time.Since(start); d != idle {
			t.Errorf("cut %s after the last byte; want %s", d, idle)
		}
		var e struct{ Error api.Error }
		json.NewDecoder(a.resp.Body).Decode(&e)
		if a.resp.StatusCode != http.StatusBadRequest || e.Error.Code != api.CodeInvalidArgument || e.Error.Details["idle_timeout_s"] != float64(30) {
			t.Fatalf("the cut upload: %d %+v; want 400 invalid_argument with idle_timeout_s 30", a.resp.StatusCode, e.Error)
		}
		if n := ledger.Open(teamA); n != 0 {
			t.Errorf("after the cut: %d uploads open", n)
		}
		if ents, _ := os.ReadDir(dir); len(ents) != 0 {
			t.Errorf("after the cut: %d files left in the upload dir", len(ents))
		}
	})
}
