//go:build linux

package cli

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/cove-dev/cove/internal/cli/cliconfig"
)

// exampleConfig is the commented example of every `cove serve` key that
// `make install` puts in /etc/cove/cove.toml.
const exampleConfig = "../../deploy/cove.toml"

const exampleHeader = `# cove serve configuration: cove serve --config /etc/cove/cove.toml
#
# Every key is a flag of cove serve (cove serve --help), shown commented out
# with its default. Each can also be set by the COVE_* variable named above
# it. Precedence: a flag on the command line, then the variable, then this
# file, then the default. Lists are TOML arrays (or comma-separated in a
# variable); durations are strings such as "30s". A key this version does
# not know is an error. cove serve --print-config prints the merged result.
#
# Generated from the flags: UPDATE_EXAMPLE_CONFIG=1 go test ./internal/cli -run TestExampleConfig
`

func generateExample(t *testing.T) []byte {
	t.Helper()
	root := newRoot(Env{Getenv: func(string) string { return "" }})
	serve, _, err := root.Find([]string{"serve"})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := cliconfig.Example(&b, exampleHeader, serve.Flags()); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestExampleConfig keeps deploy/cove.toml in step with cove serve's flags.
func TestExampleConfig(t *testing.T) {
	want := generateExample(t)
	if os.Getenv("UPDATE_EXAMPLE_CONFIG") == "1" {
		if err := os.WriteFile(exampleConfig, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(exampleConfig)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("deploy/cove.toml is out of date with cove serve's flags; regenerate it: UPDATE_EXAMPLE_CONFIG=1 go test ./internal/cli -run TestExampleConfig")
	}
	// Every key, uncommented, is a valid value of its flag: the defaults
	// written are ones cove serve reads back.
	key := regexp.MustCompile(`(?m)^#([a-z0-9-]+ = .*)$`)
	keys := key.FindAllStringSubmatch(string(got), -1)
	var n int
	serve, _, _ := newRoot(Env{Getenv: func(string) string { return "" }}).Find([]string{"serve"})
	serve.Flags().VisitAll(func(f *pflag.Flag) {
		if !f.Hidden && f.Name != "help" && f.Name != cliconfig.ConfigFlag && f.Name != cliconfig.PrintConfigFlag {
			n++
		}
	})
	if len(keys) != n || n < 40 {
		t.Fatalf("example has %d keys, cove serve %d flags", len(keys), n)
	}
	var body strings.Builder
	for _, k := range keys {
		body.WriteString(k[1] + "\n")
	}
	p := filepath.Join(t.TempDir(), "cove.toml")
	if err := os.WriteFile(p, []byte(body.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code := Main(context.Background(), Env{Args: []string{"serve", "--config", p, "--print-config"}, Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }})
	if code != 0 {
		t.Fatalf("uncommented example: exit %d: %s", code, errb.String())
	}
}

// TestServePrintConfig runs cove serve --print-config in process with
// cove serve's real flags: flag > COVE_* > file > default.
func TestServePrintConfig(t *testing.T) {
	p := filepath.Join(t.TempDir(), "cove.toml")
	body := "listen = \"127.0.0.1:7171\"\ndata-dir = \"/srv/file\"\nlog-level = \"debug\"\nlease-ttl = \"30s\"\nstore = \"postgres://cove:hunter2@db:5432/cove\"\ndns-static = [\"a.example=10.0.0.1\", \"b.example=10.0.0.2\"]\nmax-cpus = 4\n"
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"COVE_DATA_DIR": "/srv/env", "COVE_LOG_LEVEL": "warn", "COVE_BIN": "/nowhere", "COVE_TEST_IMAGES": "/nowhere"}
	var out, errb bytes.Buffer
	code := Main(context.Background(), Env{
		Args:   []string{"serve", "--config", p, "--print-config", "--log-level", "error"},
		Stdout: &out, Stderr: &errb, Getenv: func(k string) string { return env[k] },
	})
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{
		"listen = '127.0.0.1:7171'", // file
		"data-dir = '/srv/env'",     // env over file
		"log-level = 'error'",       // flag over env and file
		"lease-ttl = '30s'",         // file, a duration
		"max-cpus = 4.0",            // file, a number
		"disk-reserve-mib = 1024",   // default
		"store = 'postgres://cove:********@db:5432/cove'",
		"dns-static = ['a.example=10.0.0.1', 'b.example=10.0.0.2']",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("print-config lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "hunter2") {
		t.Fatalf("print-config shows the database password:\n%s", out.String())
	}
	// A wrong type names the file and the key, on one line, non-zero exit.
	if err := os.WriteFile(p, []byte("max-memory-mib = \"abc\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	errb.Reset()
	code = Main(context.Background(), Env{Args: []string{"serve", "--config", p}, Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }})
	want := "cove: " + p + ": max-memory-mib: invalid value \"abc\" for an integer: invalid syntax\n"
	if code == 0 || errb.String() != want {
		t.Fatalf("exit %d, stderr %q, want %q", code, errb.String(), want)
	}
}

// TestServePrintConfigBinary runs the built bin/cove the way an operator
// does: cove serve --config F --print-config.
func TestServePrintConfigBinary(t *testing.T) {
	bin := os.Getenv("COVE_BIN")
	if bin == "" {
		t.Skip("COVE_BIN is unset (make build, then COVE_BIN=$PWD/bin)")
	}
	dir := t.TempDir()
	p := filepath.Join(dir, "cove.yaml")
	if err := os.WriteFile(p, []byte("listen: 127.0.0.1:7272\nstore: postgres://cove:hunter2@db/cove\nsaves: s3://b/p?endpoint=http://127.0.0.1:9&secret_key=s3cr3t\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(bin, "cove"), "serve", "--config", p, "--print-config")
	cmd.Env = append(os.Environ(), "COVE_DATA_DIR="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	for _, want := range []string{"listen = '127.0.0.1:7272'", "data-dir = '" + dir + "'", "store = 'postgres://cove:********@db/cove'", "secret_key=********"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(string(out), "hunter2") || strings.Contains(string(out), "s3cr3t") {
		t.Fatalf("credentials shown:\n%s", out)
	}
	// Nothing was served: print-config exits before cove serve starts.
	if _, err := os.Stat(filepath.Join(dir, "cove.db")); err == nil {
		t.Fatal("print-config started the service")
	}
}
