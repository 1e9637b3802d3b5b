// Package login checks `cove login` as a person runs it: in a terminal
// (tmux), typing the key, which must not be echoed.
package login

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
)

func TestLoginInTmuxDoesNotEcho(t *testing.T) {
	bin := os.Getenv("COVE_BIN")
	if bin == "" {
		t.Skip("COVE_BIN is not set (make build, then COVE_BIN=$PWD/bin)")
	}
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Fatal("tmux is missing (make test-deps installs it)")
	}
	const key = "ck_secretvalue_7f3a9e"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/teams/me" || r.Header.Get("Authorization") != "Bearer "+key {
			w.WriteHeader(http.StatusUnauthorized)
			json.NewEncoder(w).Encode(map[string]string{"code": "unauthenticated", "message": "bad key"})
			return
		}
		json.NewEncoder(w).Encode(api.TeamMe{Team: api.Team{ID: "team_a", Name: "agents"}})
	}))
	defer srv.Close()

	xdg := t.TempDir()
	sock := fmt.Sprintf("cove-login-%d-%d", os.Getpid(), time.Now().UnixNano())
	tmuxDir := t.TempDir() // the socket goes here, and goes with it
	tmuxCmd := func(args ...string) *exec.Cmd {
		c := exec.Command("tmux", append([]string{"-L", sock}, args...)...)
		c.Env = append(os.Environ(), "TMUX_TMPDIR="+tmuxDir)
		return c
	}
	tmux := func(args ...string) string {
		out, err := tmuxCmd(args...).CombinedOutput()
		if err != nil {
			t.Fatalf("tmux %v: %v: %s", args, err, out)
		}
		return string(out)
	}
	defer tmuxCmd("kill-server").Run()
	script := fmt.Sprintf("XDG_CONFIG_HOME=%s %s login %s; echo EXIT=$?; sleep 600", xdg, filepath.Join(bin, "cove"), srv.URL)
	tmux("-f", "/dev/null", "new-session", "-d", "-x", "200", "-y", "50", "sh", "-c", script)

	waitFor := func(what string) string {
		for i := 0; i < 600; i++ {
			pane := tmux("capture-pane", "-p")
			if strings.Contains(pane, what) {
				return pane
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatalf("the pane never showed %q:\n%s", what, tmux("capture-pane", "-p"))
		return ""
	}
	waitFor("API key:")
	tmux("send-keys", "-l", key)
	tmux("send-keys", "Enter")
	pane := waitFor("EXIT=")
	if strings.Contains(pane, key) || strings.Contains(pane, key[:8]) {
		t.Fatalf("the key was echoed:\n%s", pane)
	}
	if !strings.Contains(pane, "API key:") || !strings.Contains(pane, "EXIT=0") || !strings.Contains(pane, "agents") {
		t.Fatalf("pane:\n%s", pane)
	}
	p := filepath.Join(xdg, "cove", "config.json")
	st, err := os.Stat(p)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("config %s: %v, %v", p, st, err)
	}
	b, _ := os.ReadFile(p)
	var cfg struct {
		URL    string `json:"url"`
		APIKey string `json:"api_key"`
	}
	if json.Unmarshal(b, &cfg) != nil || cfg.URL != srv.URL || cfg.APIKey != key {
		t.Fatalf("config holds %s", b)
	}
}
