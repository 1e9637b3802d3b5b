package httpapi

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/cove-dev/cove/api"
)

// FuzzDecode: any body either decodes or gets a coded error of the client
// kind; it never panics or reports an internal error.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{}`, ``, `{"name":"demo","resources":{"cpus":1,"memory_mib":512}}`,
		`{"name":`, `{"nmae":"x"}`, `{} {}`, `[1,2]`, `{"resources":{"cpus":"x"}}`,
		`{"env":{"A":"\u0000"}}`, `null`, `{"labels":{"a":1}}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		r := httptest.NewRequest("POST", "/v1/sandboxes", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		var req api.CreateSandboxRequest
		err := decode(r, &req, true)
		if err == nil {
			return
		}
		switch api.ErrorCode(err) {
		case api.CodeInvalidArgument, api.CodePayloadTooLarge:
		default:
			t.Fatalf("body %q: error %v has code %s", body, err, api.ErrorCode(err))
		}
	})
}
