package cove

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/cove-dev/cove/api"
)

func assetPath(id string) string { return "/v1/assets/" + url.PathEscape(id) }

// CreateAsset stores an archive (tar or tar.gz) as an asset of the team,
// with its sha-256 sent as a trailer. The same bytes are kept once: a
// second upload answers the existing asset.
func (c *Client) CreateAsset(ctx context.Context, name string, r io.Reader) (api.Asset, error) {
	q := url.Values{}
	if name != "" {
		q.Set("name", name)
	}
	req, err := c.newRequest(ctx, http.MethodPost, "/v1/assets", q, nil)
	if err != nil {
		return api.Asset{}, err
	}
	setDigestBody(req, r)
	req.Header.Set("Content-Type", "application/gzip")
	resp, err := c.doRequest(req)
	if err != nil {
		return api.Asset{}, err
	}
	var a api.Asset
	return a, decodeJSON(resp, &a)
}

// CreateAssetFromDir stores the folder dir (less what ex excludes) as an
// asset.
func (c *Client) CreateAssetFromDir(ctx context.Context, name, dir string, ex *Excluder) (api.Asset, error) {
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		pw.CloseWithError(WriteDirArchive(pw, dir, ex))
	}()
	a, err := c.CreateAsset(ctx, name, pr)
	pr.CloseWithError(fmt.Errorf("upload ended"))
	<-done
	return a, err
}

// GetAsset returns an asset.
func (c *Client) GetAsset(ctx context.Context, id string) (api.Asset, error) {
	var a api.Asset
	err := c.do(ctx, http.MethodGet, assetPath(id), nil, nil, &a)
	return a, err
}

// ListAssets lists a page of the team's assets.
func (c *Client) ListAssets(ctx context.Context, limit int, cursor string) (api.List[api.Asset], error) {
	q := url.Values{}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	var l api.List[api.Asset]
	err := c.do(ctx, http.MethodGet, "/v1/assets", q, nil, &l)
	return l, err
}

// DeleteAsset deletes an asset and its bytes.
func (c *Client) DeleteAsset(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, assetPath(id), nil, nil, nil)
}

// ReadAsset opens an asset's bytes; reading to io.EOF checks them against
// the server's Repr-Digest (ErrDigestMismatch otherwise).
func (c *Client) ReadAsset(ctx context.Context, id string) (*FileReader, error) {
	req, err := c.newRequest(ctx, http.MethodGet, assetPath(id)+"/content", nil, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.doRequest(req)
	if err != nil {
		return nil, err
	}
	f := &FileReader{Size: resp.ContentLength, body: resp.Body, h: sha256.New()}
	if f.Digest, err = api.ParseReprDigest(resp.Header.Get("Repr-Digest")); err != nil || f.Digest == nil {
		resp.Body.Close()
		return nil, fmt.Errorf("asset %s has no valid sha-256 Repr-Digest (%v); refusing unchecked bytes", id, err)
	}
	return f, nil
}

// SaveAsset stores a folder of a sandbox as an asset. The client's
// timeout does not apply: the time grows with the folder.
func (c *Client) SaveAsset(ctx context.Context, ref string, req api.SaveAssetRequest) (api.Asset, error) {
	var a api.Asset
	err := c.do(long(ctx), http.MethodPost, sandboxPath(ref)+"/assets", nil, req, &a)
	return a, err
}
