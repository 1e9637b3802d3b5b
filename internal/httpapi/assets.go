package httpapi

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/assets"
	"github.com/cove-dev/cove/internal/control/lifecycle"
)

// assetRoutes serve the teams' assets.
type assetRoutes struct {
	*shared
	Assets Assets
}

func (h assetRoutes) routes(auth authFunc) {
	auth("POST /v1/assets", h.idempotentUpload(h.createAsset))
	auth("GET /v1/assets", h.listAssets)
	auth("GET /v1/assets/{id}", h.getAsset)
	auth("GET /v1/assets/{id}/content", h.assetContent)
	auth("DELETE /v1/assets/{id}", h.idempotent(h.deleteAsset))
	auth("POST /v1/sandboxes/{ref}/assets", h.idempotent(h.saveAsset))
}

// createAsset stores the request body (a tar or tar.gz) as an asset: 201
// when new, 200 with the asset that has the same bytes already. A digest
// (Repr-Digest or Content-Digest, as a header or a trailer) is checked.
func (h assetRoutes) createAsset(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	req := assets.Upload{Name: r.URL.Query().Get("name"), Size: max(r.ContentLength, 0)}
	var err error
	if req.SHA256, err = requestDigest(r.Header); err != nil {
		return err
	}
	if _, ok := r.Trailer["Repr-Digest"]; ok {
		req.Trailer = func() (string, error) { return requestDigest(r.Trailer) }
	} else if _, ok := r.Trailer["Content-Digest"]; ok {
		req.Trailer = func() (string, error) { return requestDigest(r.Trailer) }
	}
	a, created, err := h.Assets.CreateAsset(r.Context(), p.Team.ID, req, h.uploadBody(w, r))
	if err != nil {
		return err
	}
	return writeAsset(w, a, created)
}

// LimitUploads sets how long an upload's body (an image, an asset, a
// source upload) may send nothing before it is cut; call it before
// serving.
func (h *Handler) LimitUploads(idle time.Duration) { h.sh.uploadIdle = idle }

// uploadBody is r's body, cut when it sends nothing for h.uploadIdle: a
// tenant that stops sending mid-upload holds an upload slot of its team
// and a temporary file only that long. The read deadline is the
// connection's, so a read blocked on a silent client ends without a
// goroutine of its own.
func (h *shared) uploadBody(w http.ResponseWriter, r *http.Request) io.Reader {
	if h.uploadIdle <= 0 {
		return r.Body
	}
	rc := http.NewResponseController(w)
	if err := rc.SetReadDeadline(time.Now().Add(h.uploadIdle)); err != nil {
		h.log.Warn("upload idle deadline not supported", "path", r.URL.Path, "err", err)
		return r.Body
	}
	return &idleBody{r: r.Body, rc: rc, idle: h.uploadIdle}
}

type idleBody struct {
	r    io.Reader
	rc   *http.ResponseController
	idle time.Duration
}

func (b *idleBody) Read(p []byte) (int, error) {
	b.rc.SetReadDeadline(time.Now().Add(b.idle))
	n, err := b.r.Read(p)
	switch {
	case err == io.EOF:
		// The server reads on in the background to notice a client that
		// goes away; a deadline left behind would look like one.
		b.rc.SetReadDeadline(time.Time{})
	case errors.Is(err, os.ErrDeadlineExceeded):
		return n, &api.Error{Code: api.CodeInvalidArgument,
			Message: fmt.Sprintf("the upload sent nothing for %s and was cut; nothing of it was kept", b.idle),
			Details: map[string]any{"idle_timeout_s": int(b.idle / time.Second)}}
	}
	return n, err
}

func writeAsset(w http.ResponseWriter, a api.Asset, created bool) error {
	w.Header().Set("Location", "/v1/assets/"+a.ID)
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	return writeJSON(w, status, a)
}

func (h assetRoutes) listAssets(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	pg, err := paging(r)
	if err != nil {
		return err
	}
	l, err := h.Assets.ListAssets(r.Context(), p.Team.ID, pg.Cursor, pg.Limit)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, l)
}

func (h assetRoutes) getAsset(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	a, err := h.Assets.GetAsset(r.Context(), p.Team.ID, r.PathValue("id"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, a)
}

// assetContent sends an asset's bytes with their Repr-Digest; bytes that
// no longer match it on the node cut the response short.
func (h assetRoutes) assetContent(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	a, rc, err := h.Assets.OpenAsset(r.Context(), p.Team.ID, r.PathValue("id"))
	if err != nil {
		return err
	}
	defer rc.Close()
	sum, err := hexDigest(a.SHA256)
	if err != nil {
		return err
	}
	hd := w.Header()
	hd.Set("Content-Type", "application/gzip")
	hd.Set("Repr-Digest", api.FormatReprDigest(sum))
	hd.Set("ETag", `"`+a.SHA256+`"`)
	hd.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	if _, err := copyStream(w, rc); err != nil {
		h.log.Error("asset download cut short", "asset", a.ID, "err", err)
		panic(http.ErrAbortHandler)
	}
	return nil
}

func (h assetRoutes) deleteAsset(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	if err := h.Assets.DeleteAsset(r.Context(), p.Team.ID, r.PathValue("id")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// saveAsset stores a folder of a sandbox as an asset.
func (h assetRoutes) saveAsset(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	var req api.SaveAssetRequest
	if err := decode(r, &req, false); err != nil {
		return err
	}
	a, created, err := h.Assets.SaveAsset(r.Context(), p.Team.ID, r.PathValue("ref"), req)
	if err != nil {
		return err
	}
	return writeAsset(w, a, created)
}

func hexDigest(s string) ([]byte, error) {
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != 32 {
		return nil, fmt.Errorf("asset digest %q is not a hex sha-256", s)
	}
	return b, nil
}
