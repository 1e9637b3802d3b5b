package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/cove-dev/cove/api"
)

// TestTeamsKeyFormat: `cove teams key` asks for cove's shape unless --e2b
// asks for E2B's, and prints the key once.
func TestTeamsKeyFormat(t *testing.T) {
	var formats []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req api.CreateKeyRequest
		if r.Method != http.MethodPost || r.URL.Path != "/v1/teams/team_x/keys" || json.NewDecoder(r.Body).Decode(&req) != nil {
			http.Error(w, "unexpected", http.StatusBadRequest)
			return
		}
		formats = append(formats, req.Format)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(api.KeyResponse{KeyID: "key_1", TeamID: "team_x", APIKey: "made-" + req.Format})
	}))
	defer srv.Close()
	for _, c := range []struct {
		args   []string
		format string
	}{
		{[]string{"teams", "key", "team_x"}, ""},
		{[]string{"teams", "key", "team_x", "--e2b"}, api.KeyFormatE2B},
	} {
		var out, errb bytes.Buffer
		code := Main(context.Background(), Env{
			Args: c.args, Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb,
			Getenv: func(k string) string {
				return map[string]string{"COVE_URL": srv.URL, "COVE_API_KEY": "k"}[k]
			},
		})
		if code != 0 || len(formats) == 0 || formats[len(formats)-1] != c.format || !strings.Contains(out.String(), "made-"+c.format) {
			t.Errorf("%v: exit %d, formats %q, output %q %q; want format %q", c.args, code, formats, out.String(), errb.String(), c.format)
		}
	}
}
