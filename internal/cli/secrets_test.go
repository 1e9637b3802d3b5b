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

// TestSecretsSet: a piped value loses one trailing newline and reaches the
// server; the CLI prints nothing of it; empty input stores nothing.
func TestSecretsSet(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req api.PutSecretRequest
		if r.Method != http.MethodPut || r.URL.Path != "/v1/secrets/tok" || json.NewDecoder(r.Body).Decode(&req) != nil {
			http.Error(w, "unexpected", http.StatusBadRequest)
			return
		}
		got = append(got, req.Value)
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(api.Secret{Name: "tok"})
	}))
	defer srv.Close()
	run := func(stdin string) (int, string) {
		var out, errb bytes.Buffer
		code := Main(context.Background(), Env{
			Args: []string{"secrets", "set", "tok"}, Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errb,
			Getenv: func(k string) string {
				return map[string]string{"COVE_URL": srv.URL, "COVE_API_KEY": "k"}[k]
			},
		})
		return code, out.String() + errb.String()
	}
	for _, c := range []struct{ in, want string }{
		{"value-one\n", "value-one"},
		{"value-two\r\n", "value-two"},
		{"two\nlines\n\n", "two\nlines\n"},
		{"no-newline", "no-newline"},
	} {
		code, out := run(c.in)
		if code != 0 || got[len(got)-1] != c.want {
			t.Errorf("stdin %q: exit %d, stored %q; want %q", c.in, code, got[len(got)-1], c.want)
		}
		if strings.Contains(out, c.want) {
			t.Errorf("stdin %q: the CLI printed the value: %q", c.in, out)
		}
	}
	n := len(got)
	if code, out := run("\n"); code != ExitCLI || len(got) != n || !strings.Contains(out, "empty") {
		t.Errorf("empty stdin: exit %d, %q, %d stored", code, out, len(got)-n)
	}
}
