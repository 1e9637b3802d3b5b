package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/cove-dev/cove/api"
)

// fakeServer answers /v1/teams/me for the key "good" and lists two
// sandboxes, recording the key each request carried.
func fakeServer(t *testing.T) (*httptest.Server, *[]string) {
	var keys []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		keys = append(keys, key)
		w.Header().Set("Content-Type", "application/json")
		if key != "good" && key != "other" {
			w.WriteHeader(http.StatusUnauthorized)
			json.NewEncoder(w).Encode(map[string]any{"code": "unauthenticated", "message": "bad key"})
			return
		}
		switch r.URL.Path {
		case "/v1/teams/me":
			json.NewEncoder(w).Encode(api.TeamMe{Team: api.Team{ID: "team_a", Name: "agents"}})
		case "/v1/sandboxes":
			json.NewEncoder(w).Encode(api.List[api.Sandbox]{Items: []api.Sandbox{{ID: "sbx_one", Name: "alpha"}, {ID: "sbx_two", Name: "beta"}}})
		default:
			w.WriteHeader(http.StatusNotFound)
			json.NewEncoder(w).Encode(map[string]any{"code": "not_found", "message": "sandbox not found"})
		}
	}))
	t.Cleanup(srv.Close)
	return srv, &keys
}

func run(env map[string]string, stdin string, args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := Main(context.Background(), Env{
		Args: args, Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errb,
		Getenv: func(k string) string { return env[k] },
	})
	return code, out.String(), errb.String()
}

// TestLoginProfiles: login checks the key and keeps it under the profile
// in $XDG_CONFIG_HOME/cove/config.json (0600, dir 0700); later commands
// use it; COVE_PROFILE/--profile select; COVE_API_KEY and --api-key
// override; a legacy file written by `cove serve` reads as "default";
// logout removes the entry.
func TestLoginProfiles(t *testing.T) {
	srv, keys := fakeServer(t)
	home := t.TempDir()
	xdg := filepath.Join(t.TempDir(), "xdg")
	env := map[string]string{"HOME": home, "XDG_CONFIG_HOME": xdg}

	if code, _, errs := run(env, "wrong\n", "login", srv.URL, "--api-key-stdin"); code != ExitCLI || !strings.Contains(errs, "does not accept") {
		t.Fatalf("bad key: exit %d, %q", code, errs)
	}
	if _, err := os.Stat(filepath.Join(xdg, "cove", "config.json")); !os.IsNotExist(err) {
		t.Fatalf("a refused key was stored: %v", err)
	}
	if code, out, errs := run(env, "good\n", "login", srv.URL, "--api-key-stdin"); code != 0 || !strings.Contains(out, "agents") {
		t.Fatalf("login: exit %d, %q %q", code, out, errs)
	}
	if code, _, errs := run(env, "other\n", "login", srv.URL, "--api-key-stdin", "--profile", "work"); code != 0 {
		t.Fatalf("login work: exit %d, %q", code, errs)
	}
	p := filepath.Join(xdg, "cove", "config.json")
	st, err := os.Stat(p)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("config %s: %v %v", p, st, err)
	}
	if dst, _ := os.Stat(filepath.Dir(p)); dst.Mode().Perm() != 0o700 {
		t.Fatalf("config dir mode %v", dst.Mode())
	}
	if _, err := os.Stat(filepath.Join(home, ".config")); !os.IsNotExist(err) {
		t.Fatalf("with XDG_CONFIG_HOME set, ~/.config was written: %v", err)
	}
	lastKey := func(args ...string) string {
		*keys = nil
		code, _, errs := run(env, "", args...)
		if code != 0 || len(*keys) == 0 {
			t.Fatalf("%v: exit %d %q", args, code, errs)
		}
		return (*keys)[len(*keys)-1]
	}
	if k := lastKey("ls"); k != "good" {
		t.Errorf("default profile sent %q", k)
	}
	if k := lastKey("ls", "--profile", "work"); k != "other" {
		t.Errorf("--profile work sent %q", k)
	}
	env["COVE_PROFILE"] = "work"
	if k := lastKey("ls"); k != "other" {
		t.Errorf("COVE_PROFILE=work sent %q", k)
	}
	if k := lastKey("ls", "--profile", "default"); k != "good" {
		t.Errorf("--profile beats COVE_PROFILE: sent %q", k)
	}
	env["COVE_API_KEY"] = "good"
	if k := lastKey("ls"); k != "good" {
		t.Errorf("COVE_API_KEY beats the profile: sent %q", k)
	}
	if k := lastKey("ls", "--api-key", "other"); k != "other" {
		t.Errorf("--api-key beats COVE_API_KEY: sent %q", k)
	}
	delete(env, "COVE_API_KEY")
	if code, _, errs := run(env, "", "ls", "--profile", "nosuch"); code != ExitCLI || !strings.Contains(errs, "nosuch") {
		t.Errorf("unknown profile: exit %d %q", code, errs)
	}
	if code, _, _ := run(env, "", "logout"); code != 0 {
		t.Fatalf("logout work: exit %d", code)
	}
	cfg, err := ReadConfig(func(k string) string { return env[k] })
	if err != nil || strings.Join(cfg.Names(), ",") != "default" {
		t.Fatalf("after logout: %v %v", cfg.Names(), err)
	}

	// A config an older `cove serve` wrote (no XDG): read as "default".
	legacy := map[string]string{"HOME": home}
	os.MkdirAll(filepath.Join(home, ".config", "cove"), 0o700)
	os.WriteFile(filepath.Join(home, ".config", "cove", "config.json"), []byte(`{"url":"`+srv.URL+`","api_key":"other"}`), 0o600)
	env = legacy
	if k := lastKey("ls"); k != "other" {
		t.Errorf("legacy config sent %q", k)
	}
}

// TestCompleteSandboxes: `cove __complete exec ""` offers the IDs and
// names of the sandboxes, and nothing (exit 0) when the server is down.
func TestCompleteSandboxes(t *testing.T) {
	srv, _ := fakeServer(t)
	env := map[string]string{"COVE_URL": srv.URL, "COVE_API_KEY": "good"}
	for _, args := range [][]string{{"__complete", "exec", ""}, {"__complete", "sleep", "alpha", ""}, {"__complete", "get", ""}} {
		code, out, errs := run(env, "", args...)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		got := lines[:len(lines)-1]
		sort.Strings(got)
		if code != 0 || strings.Join(got, ",") != "alpha,beta,sbx_one,sbx_two" {
			t.Errorf("%v: exit %d, %q %q", args, code, out, errs)
		}
	}
	code, out, _ := run(env, "", "__complete", "files", "cat", "")
	if code != 0 || !strings.Contains(out, "alpha:\n") || !strings.Contains(out, ":6\n") {
		t.Errorf("files cat: exit %d %q", code, out)
	}
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := "http://" + l.Addr().String()
	l.Close()
	code, out, errs := run(map[string]string{"COVE_URL": dead, "COVE_API_KEY": "good"}, "", "__complete", "exec", "")
	if code != 0 || strings.TrimSpace(out) != ":4" || strings.Contains(errs, "cove:") {
		t.Errorf("server down: exit %d, %q %q", code, out, errs)
	}
}

// TestExitCodes: usage errors exit 2, every other failure of the CLI
// itself 125.
func TestExitCodes(t *testing.T) {
	srv, _ := fakeServer(t)
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := "http://" + l.Addr().String()
	l.Close()
	up := map[string]string{"COVE_URL": srv.URL, "COVE_API_KEY": "good"}
	down := map[string]string{"COVE_URL": dead, "COVE_API_KEY": "good"}
	for _, c := range []struct {
		name string
		env  map[string]string
		args []string
		want int
	}{
		{"success", up, []string{"ls"}, 0},
		{"unknown flag", up, []string{"ls", "--nosuch"}, ExitUsage},
		{"unknown command", up, []string{"nosuch"}, ExitUsage},
		{"too few args", up, []string{"get"}, ExitUsage},
		{"too many args", up, []string{"network", "a", "b"}, ExitUsage},
		{"exec without --", up, []string{"exec", "alpha", "true"}, ExitUsage},
		{"unknown sandbox", up, []string{"get", "nosuch"}, ExitCLI},
		{"bad key", map[string]string{"COVE_URL": srv.URL, "COVE_API_KEY": "bad"}, []string{"ls"}, ExitCLI},
		{"server unreachable", down, []string{"ls"}, ExitCLI},
		{"no key", map[string]string{"COVE_URL": srv.URL}, []string{"ls"}, ExitCLI},
		{"login needs a terminal", map[string]string{"COVE_URL": srv.URL}, []string{"login"}, ExitUsage},
	} {
		code, _, errs := run(c.env, "", c.args...)
		if code != c.want || (code != 0 && strings.Count(errs, "\n") != 1) {
			t.Errorf("%s: exit %d, stderr %q; want %d and one line", c.name, code, errs, c.want)
		}
	}
	if _, out, _ := run(up, "", "--help"); !strings.Contains(out, "125") || !strings.Contains(out, "usage error") {
		t.Errorf("--help lacks the exit codes: %q", out)
	}
}
