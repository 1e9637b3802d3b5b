package cliconfig

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
)

// opts are flags of several types, as a command binds them.
type opts struct {
	listen string
	mem    int64
	cpus   float64
	debug  bool
	ttl    time.Duration
	arr    []string
	slice  []string
}

// run builds a command with opts' flags, installs the config hook and
// runs it with args and env; it returns the opts the command saw.
func run(t *testing.T, args []string, env map[string]string) (opts, string, error) {
	t.Helper()
	var o opts
	root := &cobra.Command{Use: "cove", SilenceErrors: true, SilenceUsage: true}
	c := &cobra.Command{Use: "serve", RunE: func(*cobra.Command, []string) error { return nil }}
	f := c.Flags()
	f.StringVar(&o.listen, "listen", "127.0.0.1:7070", "address")
	f.Int64Var(&o.mem, "memory-mib", 512, "memory")
	f.Float64Var(&o.cpus, "max-cpus", 2, "cpus")
	f.BoolVar(&o.debug, "debug", false, "debug")
	f.DurationVar(&o.ttl, "lease-ttl", 15*time.Second, "lease")
	f.StringArrayVar(&o.arr, "static", nil, "repeatable")
	f.StringSliceVar(&o.slice, "control", []string{"a"}, "comma list")
	root.AddCommand(c)
	Install(root, func(k string) string { return env[k] })
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs(append([]string{"serve"}, args...))
	err := root.Execute()
	return o, out.String(), err
}

func writeFile(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPrecedence(t *testing.T) {
	toml := writeFile(t, "cove.toml", `
listen = "0.0.0.0:1"
memory-mib = 1024
max-cpus = 4
debug = true
lease-ttl = "30s"
static = ["f1", "f2"]
control = ["x", "y"]
`)
	yml := writeFile(t, "cove.yaml", "listen: 0.0.0.0:1\nmemory-mib: 1024\nmax-cpus: 4\ndebug: true\nlease-ttl: 30s\nstatic: [f1, f2]\ncontrol: x,y\n")
	env := map[string]string{
		"COVE_LISTEN": "0.0.0.0:2", "COVE_MEMORY_MIB": "2048", "COVE_MAX_CPUS": "6", "COVE_DEBUG": "false",
		"COVE_LEASE_TTL": "1m", "COVE_STATIC": "e1,e2", "COVE_CONTROL": "p,q",
	}
	flags := []string{"--listen", "0.0.0.0:3", "--memory-mib", "4096", "--max-cpus", "8", "--debug=true",
		"--lease-ttl", "2m", "--static", "g1", "--static", "g2", "--control", "r"}
	def := opts{listen: "127.0.0.1:7070", mem: 512, cpus: 2, ttl: 15 * time.Second, slice: []string{"a"}}
	file := opts{listen: "0.0.0.0:1", mem: 1024, cpus: 4, debug: true, ttl: 30 * time.Second, arr: []string{"f1", "f2"}, slice: []string{"x", "y"}}
	fromEnv := opts{listen: "0.0.0.0:2", mem: 2048, cpus: 6, debug: false, ttl: time.Minute, arr: []string{"e1", "e2"}, slice: []string{"p", "q"}}
	fromFlag := opts{listen: "0.0.0.0:3", mem: 4096, cpus: 8, debug: true, ttl: 2 * time.Minute, arr: []string{"g1", "g2"}, slice: []string{"r"}}
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want opts
	}{
		{"default", nil, nil, def},
		{"toml file over default", []string{"--config", toml}, nil, file},
		{"yaml file over default", []string{"--config", yml}, nil, file},
		{"COVE_CONFIG names the file", nil, map[string]string{"COVE_CONFIG": toml}, file},
		{"env over default", nil, env, fromEnv},
		{"env over file", []string{"--config", toml}, env, fromEnv},
		{"flag over env and file", append([]string{"--config", toml}, flags...), env, fromFlag},
		{"flag over default", flags, nil, fromFlag},
		{"unknown COVE_ variables ignored", []string{"--config", toml},
			map[string]string{"COVE_BIN": "/x", "COVE_TEST_IMAGES": "/y", "COVE_REQUIRE_S3": "1", "COVE_API_KEY": "k"}, file},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _, err := run(t, tc.args, tc.env)
			if err != nil {
				t.Fatal(err)
			}
			if got.listen != tc.want.listen || got.mem != tc.want.mem || got.cpus != tc.want.cpus || got.debug != tc.want.debug ||
				got.ttl != tc.want.ttl || strings.Join(got.arr, "|") != strings.Join(tc.want.arr, "|") ||
				strings.Join(got.slice, "|") != strings.Join(tc.want.slice, "|") {
				t.Fatalf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestErrors(t *testing.T) {
	for _, tc := range []struct {
		name, file, body string
		env              map[string]string
		want             string
	}{
		{"unknown key", "c.toml", "listen = \"x\"\nnope = 1\n", nil, "c.toml: nope: unknown key"},
		{"wrong type", "c.toml", "memory-mib = \"abc\"\n", nil, `c.toml: memory-mib: invalid value "abc" for an integer`},
		{"wrong type yaml", "c.yaml", "memory-mib: abc\n", nil, `c.yaml: memory-mib: invalid value "abc" for an integer`},
		{"duration without unit", "c.toml", "lease-ttl = 30\n", nil, `c.toml: lease-ttl: invalid value "30" for a duration`},
		{"number for a string", "c.toml", "listen = 7070\n", nil, "c.toml: listen: expected a string"},
		{"table for a scalar", "c.toml", "[listen]\na = 1\n", nil, "c.toml: listen: expected a string, got a table"},
		{"bad syntax", "c.toml", "listen = \n", nil, "c.toml: "},
		{"bad extension", "c.ini", "listen=x\n", nil, "c.ini: a config file is .toml, .yaml or .yml"},
		{"bad env", "c.toml", "", map[string]string{"COVE_MEMORY_MIB": "lots"}, `COVE_MEMORY_MIB: invalid value "lots" for an integer`},
		{"config key in file", "c.toml", "config = \"other.toml\"\n", nil, "c.toml: config: unknown key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := writeFile(t, tc.file, tc.body)
			_, _, err := run(t, []string{"--config", p}, tc.env)
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("err = %v, want one line containing %q", err, tc.want)
			}
			if tc.name != "bad env" && !strings.HasPrefix(err.Error(), p+": ") {
				t.Fatalf("err = %v, want it to start with the file", err)
			}
		})
	}
	if _, _, err := run(t, []string{"--config", filepath.Join(t.TempDir(), "missing.toml")}, nil); err == nil || !strings.Contains(err.Error(), "missing.toml") {
		t.Fatalf("missing file: err = %v", err)
	}
}

func TestPrintConfig(t *testing.T) {
	p := writeFile(t, "c.toml", "listen = \"0.0.0.0:1\"\nstatic = [\"a\", \"b\"]\n")
	o, out, err := run(t, []string{"--config", p, "--print-config", "--debug"}, map[string]string{"COVE_MEMORY_MIB": "99"})
	if err != nil {
		t.Fatal(err)
	}
	_ = o
	for _, want := range []string{"listen = '0.0.0.0:1'", "memory-mib = 99", "debug = true", "lease-ttl = '15s'", "static = ['a', 'b']", "control = ['a']"} {
		if !strings.Contains(out, want) {
			t.Errorf("print-config lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "print-config") || strings.Contains(out, "\nconfig") {
		t.Errorf("print-config prints its own flags:\n%s", out)
	}
	// What it prints loads back to the same values.
	again := writeFile(t, "again.toml", out)
	o2, out2, err := run(t, []string{"--config", again, "--print-config"}, nil)
	if err != nil || out2 != out {
		t.Fatalf("reloaded: %v\n%s\nvs\n%s", err, out2, out)
	}
	_ = o2
}

func TestMask(t *testing.T) {
	for _, tc := range []struct{ flag, in, want string }{
		{"store", "postgres://u:pw@db:5432/cove?sslmode=disable", "postgres://u:" + Masked + "@db:5432/cove?sslmode=disable"},
		{"store", "postgres://u@db/cove", "postgres://u@db/cove"},
		{"store", "sqlite:/var/lib/cove/cove.db", "sqlite:/var/lib/cove/cove.db"},
		{"saves", "s3://bucket/p?endpoint=http://h:9000&secret_key=abc&access_key=AK", "s3://bucket/p?access_key=" + Masked + "&endpoint=http://h:9000&secret_key=" + Masked},
		{"saves", "s3://AK:SK@bucket/p", "s3://AK:" + Masked + "@bucket/p"},
		{"api-key", "cove_abc", Masked},
		{"join-token", "t", Masked},
		{"db-password", "p", Masked},
		{"secrets-key-file", "/etc/cove/secrets.key", "/etc/cove/secrets.key"},
		{"join-token-file", "/x", "/x"},
		{"join-token-ttl", "24h0m0s", "24h0m0s"},
		{"saves-credentials", "/etc/cove/s3.ini", "/etc/cove/s3.ini"},
		{"listen", "127.0.0.1:7070", "127.0.0.1:7070"},
	} {
		if got := Mask(tc.flag, tc.in); got != tc.want {
			t.Errorf("Mask(%s, %s) = %s, want %s", tc.flag, tc.in, got, tc.want)
		}
	}
}

func TestEnvName(t *testing.T) {
	for in, want := range map[string]string{"listen": "COVE_LISTEN", "data-dir": "COVE_DATA_DIR", "url": "COVE_URL", "max-cpus": "COVE_MAX_CPUS"} {
		if got := EnvName(in); got != want {
			t.Errorf("EnvName(%s) = %s", in, got)
		}
	}
}
