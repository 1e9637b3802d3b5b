package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cove-dev/cove/api"
)

// TestGetRemovesCorruptDownload: a download whose bytes do not match the
// server's digest fails, and nothing is left where it was going.
func TestGetRemovesCorruptDownload(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sum := sha256.Sum256([]byte("the real bytes"))
		w.Header().Set("Repr-Digest", api.FormatReprDigest(sum[:]))
		w.Write([]byte("corrupted bytes"))
	}))
	defer srv.Close()
	dir := t.TempDir()
	var out, errb bytes.Buffer
	env := Env{
		Args:  []string{"files", "get", "sb:/workspace/f.txt", filepath.Join(dir, "f.txt")},
		Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb,
		Getenv: func(k string) string {
			return map[string]string{"COVE_URL": srv.URL, "COVE_API_KEY": "k"}[k]
		},
	}
	if code := Main(context.Background(), env); code != ExitCLI {
		t.Errorf("exit code %d, want 125", code)
	}
	if !strings.Contains(errb.String(), "do not match") || !strings.Contains(errb.String(), "removed") {
		t.Errorf("stderr: %q", errb.String())
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("left behind: %v", left)
	}
}
