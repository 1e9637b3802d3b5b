package httpapi

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"strings"
	"syscall"
	"testing"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/files"
	"github.com/cove-dev/cove/internal/control/lifecycle"
)

// sqliteFull is an error as SQLite reports a database that cannot grow.
type sqliteFull struct{}

func (sqliteFull) Error() string { return "database or disk is full (13)" }
func (sqliteFull) Code() int     { return 13 }

// A write that finds the data disk full answers 507 insufficient_storage
// naming the disk, never 500; a create answers 429 resource_exhausted,
// whether the full write was the idempotency claim's (before the create
// runs) or the create's own, with or without an Idempotency-Key.
func TestFullDataDisk(t *testing.T) {
	enospc := fmt.Errorf("create output dir: %w", &fs.PathError{Op: "mkdir", Path: "/var/lib/cove/output/x", Err: syscall.ENOSPC})
	claimFull := fmt.Errorf("claim idempotency key: %w", sqliteFull{})
	const disk = "the node's data disk (/var/lib/cove)"
	for _, tc := range []struct {
		name         string
		method, path string
		body         string
		key          bool
		claim        error // the idempotency claim's error
		set          func(f *fakeControlPlane, err error)
		err          error
		status       int
		code         api.Code
	}{
		{name: "exec", method: "POST", path: "/v1/sandboxes/sbx_1/commands", body: `{"command":"true"}`, err: enospc,
			set: func(f *fakeControlPlane, err error) {
				f.ExecFn = func(context.Context, string, string, bool, api.CreateCommandRequest) (api.Command, error) {
					return api.Command{}, err
				}
			}, status: http.StatusInsufficientStorage, code: api.CodeInsufficientStorage},
		{name: "exec keyed", method: "POST", path: "/v1/sandboxes/sbx_1/commands", body: `{"command":"true"}`, key: true, err: enospc,
			set: func(f *fakeControlPlane, err error) {
				f.ExecFn = func(context.Context, string, string, bool, api.CreateCommandRequest) (api.Command, error) {
					return api.Command{}, err
				}
			}, status: http.StatusInsufficientStorage, code: api.CodeInsufficientStorage},
		{name: "exec claim", method: "POST", path: "/v1/sandboxes/sbx_1/commands", body: `{"command":"true"}`, key: true, claim: claimFull,
			status: http.StatusInsufficientStorage, code: api.CodeInsufficientStorage},
		{name: "write file", method: "PUT", path: "/v1/sandboxes/sbx_1/files/content?path=/workspace/f", body: "hello", err: fmt.Errorf("insert: %w", sqliteFull{}),
			set: func(f *fakeControlPlane, err error) {
				f.WriteFileFn = func(context.Context, files.Target, files.WriteRequest, io.Reader) (api.FileEntry, bool, error) {
					return api.FileEntry{}, false, err
				}
			}, status: http.StatusInsufficientStorage, code: api.CodeInsufficientStorage},
		{name: "create", method: "POST", path: "/v1/sandboxes", body: `{}`, err: fmt.Errorf("insert sandbox: %w", sqliteFull{}),
			set: func(f *fakeControlPlane, err error) {
				f.CreateSandboxFn = func(context.Context, string, api.CreateSandboxRequest) (api.Sandbox, error) {
					return api.Sandbox{}, err
				}
			}, status: http.StatusTooManyRequests, code: api.CodeResourceExhausted},
		{name: "create keyed", method: "POST", path: "/v1/sandboxes", body: `{}`, key: true, err: enospc,
			set: func(f *fakeControlPlane, err error) {
				f.CreateSandboxFn = func(context.Context, string, api.CreateSandboxRequest) (api.Sandbox, error) {
					return api.Sandbox{}, err
				}
			}, status: http.StatusTooManyRequests, code: api.CodeResourceExhausted},
		{name: "create claim", method: "POST", path: "/v1/sandboxes", body: `{}`, key: true, claim: claimFull,
			status: http.StatusTooManyRequests, code: api.CodeResourceExhausted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestServer(t)
			s.h.NameDataDisk(disk)
			if tc.set != nil {
				tc.set(s.fake, tc.err)
			}
			if tc.claim != nil {
				s.fake.IdempotentlyFn = func(context.Context, string, string, string, func(context.Context) lifecycle.Answer) (lifecycle.Answer, bool, error) {
					return lifecycle.Answer{}, false, tc.claim
				}
			}
			h := map[string]string{"Content-Type": "application/json"}
			if tc.key {
				h["Idempotency-Key"] = "k-" + tc.name
			}
			if tc.method == "PUT" {
				h["Content-Type"] = "application/octet-stream"
			}
			resp, body := s.do(t, tc.method, tc.path, h, strings.NewReader(tc.body))
			e := wantError(t, resp, body, tc.status, tc.code)
			if !strings.Contains(e.Message, disk+" is full") {
				t.Errorf("message %q does not name %s", e.Message, disk)
			}
			if !strings.Contains(s.logs.String(), "a write found the data disk full") {
				t.Errorf("the cause was not logged:\n%s", s.logs.String())
			}
		})
	}
}
