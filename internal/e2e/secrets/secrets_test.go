// Package secrets checks teams' secrets end to end on a real server: a
// value reaches the command that names it and nothing else, is redacted
// from every way output is read back (also when printed in pieces), is on
// no file of the data dir, survives a key rotation, and is no other
// team's to see or use.
package secrets

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
	"github.com/cove-dev/cove/internal/secrets"
	cove "github.com/cove-dev/cove/sdk/go"
)

func TestMain(m *testing.M) { e2etest.Main(m) }

func randomValue(t *testing.T, prefix string) string {
	t.Helper()
	b := make([]byte, 16)
	rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// printSplit prints $TOKEN in two writes a second apart: its first 10
// bytes, then the rest and a newline.
const printSplit = `printf %s "$TOKEN" | head -c 10; sleep 1; printf %s "$TOKEN" | tail -c +11; echo`

// views reads a command's output every way the API offers it: the ?wait
// answer (given), NDJSON, the raw stdout stream, and a replaying attach.
func views(t *testing.T, s *e2etest.Server, c *cove.Client, key, ref, id string) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	out := map[string]string{}
	var nd bytes.Buffer
	if err := c.Output(ctx, ref, id, 0, true, func(r api.OutputRecord) error {
		if r.Stream == "stdout" {
			nd.Write(r.Data)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	out["ndjson"] = nd.String()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/v1/sandboxes/"+ref+"/commands/"+id+"/stdout", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	out["raw stdout"] = string(raw)
	out["attach replay"] = attachAll(t, c, ref, id)
	return out
}

// bothViews reads a command's output, both streams, every way the API
// offers it: NDJSON (interleaved), the raw stdout and stderr streams, and
// a replaying attach.
func bothViews(t *testing.T, s *e2etest.Server, c *cove.Client, key, ref, id string) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	out := map[string]string{}
	var nd bytes.Buffer
	if err := c.Output(ctx, ref, id, 0, true, func(r api.OutputRecord) error {
		nd.Write(r.Data)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	out["ndjson"] = nd.String()
	for _, stream := range []string{"stdout", "stderr"} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/v1/sandboxes/"+ref+"/commands/"+id+"/"+stream, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		out["raw "+stream] = string(raw)
	}
	out["attach replay"] = attachAll(t, c, ref, id)
	return out
}

func attachAll(t *testing.T, c *cove.Client, ref, id string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	a, err := c.Attach(ctx, ref, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for {
		data, done, err := a.Read(ctx)
		if err != nil {
			t.Fatalf("attach: %v", err)
		}
		b.Write(data)
		if done {
			return b.String()
		}
	}
}

func checkViews(t *testing.T, what string, got map[string]string, want, value string) {
	t.Helper()
	for view, out := range got {
		if strings.Contains(out, value) {
			t.Errorf("%s, %s: the value is in %q", what, view, out)
		}
		if out != want {
			t.Errorf("%s, %s: %q; want %q", what, view, out, want)
		}
	}
}

// scanDataDir fails the test if value is in any file under dir. It reads
// every regular file of dir's filesystem (the database, its WAL, recorded
// output, sandbox disks, saves), the data extents of sparse ones only;
// mounts below dir (a sandbox's overlay root and disk) are other
// filesystems whose bytes live in files of dir (disk.img).
func scanDataDir(t *testing.T, dir string, needles ...string) map[string][]string {
	t.Helper()
	var root unix.Stat_t
	if err := unix.Stat(dir, &root); err != nil {
		t.Fatal(err)
	}
	found := map[string][]string{}
	files := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed meanwhile
			}
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return nil
		}
		if st.Dev != root.Dev {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		files++
		for _, n := range scanFile(t, p, needles) {
			found[n] = append(found[n], p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 5 {
		t.Fatalf("scanned only %d files under %s", files, dir)
	}
	return found
}

// scanFile returns the needles found in the data of file p.
func scanFile(t *testing.T, p string, needles []string) []string {
	f, err := os.Open(p)
	if err != nil {
		return nil
	}
	defer f.Close()
	fd := int(f.Fd())
	maxLen := 0
	for _, n := range needles {
		maxLen = max(maxLen, len(n))
	}
	hit := map[string]bool{}
	buf := make([]byte, 1<<20)
	var off int64
	for {
		start, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if err != nil {
			break // ENXIO: no data after off
		}
		end, err := unix.Seek(fd, start, unix.SEEK_HOLE)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		var carry []byte
		for pos := start; pos < end; {
			n, err := f.ReadAt(buf[:min(int64(len(buf)), end-pos)], pos)
			if n == 0 {
				break
			}
			chunk := append(carry, buf[:n]...)
			for _, nd := range needles {
				if bytes.Contains(chunk, []byte(nd)) {
					hit[nd] = true
				}
			}
			carry = append([]byte(nil), chunk[max(0, len(chunk)-maxLen):]...)
			pos += int64(n)
			if err != nil {
				break
			}
		}
		off = end
	}
	var out []string
	for n := range hit {
		out = append(out, n)
	}
	return out
}

func TestSecrets(t *testing.T) {
	s := e2etest.StartServer(t)
	ctx := t.Context()
	keyA := ""
	a := s.NewTeam("secrets-a")
	b := s.NewTeam("secrets-b")
	keyA = s.Keys()[1]
	value := randomValue(t, "cove-e2e-secret-")

	if _, err := a.PutSecret(ctx, "tok", value); err != nil {
		t.Fatal(err)
	}
	sb := e2etest.Create(t, a, api.CreateSandboxRequest{Name: "sec", Secrets: map[string]api.SecretRef{"TOKEN": {Secret: "tok"}}})
	if sb.Secrets["TOKEN"] != "tok" {
		t.Fatalf("sandbox secrets %v", sb.Secrets)
	}

	t.Run("whole", func(t *testing.T) {
		res := e2etest.Sh(t, a, sb.ID, `printf 'x %s y\n' "$TOKEN"`)
		want := "x [secret:tok] y\n"
		if res.Stdout != want {
			t.Fatalf("stdout %q; want %q", res.Stdout, want)
		}
		v := views(t, s, a, keyA, sb.ID, res.Command.ID)
		v["wait"] = res.Stdout
		checkViews(t, "whole", v, want, value)
	})

	t.Run("split across two writes", func(t *testing.T) {
		c, err := a.Exec(ctx, sb.ID, api.CreateCommandRequest{Command: printSplit})
		if err != nil {
			t.Fatal(err)
		}
		// A follower from the start reads the live stream.
		live := attachAll(t, a, sb.ID, c.ID)
		res, err := a.ExecWait(ctx, sb.ID, api.CreateCommandRequest{Command: printSplit})
		if err != nil {
			t.Fatal(err)
		}
		want := "[secret:tok]\n"
		v := views(t, s, a, keyA, sb.ID, c.ID)
		v["attach live"] = live
		v["wait"] = res.Stdout
		checkViews(t, "split", v, want, value)
		// Proof that the value really was printed, in two pieces.
		sum := sha256.Sum256([]byte(value))
		got := e2etest.MustOK(t, a, sb.ID, `(`+strings.ReplaceAll(printSplit, "; echo", "")+`) | sha256sum`)
		if !strings.HasPrefix(got, hex.EncodeToString(sum[:])) {
			t.Fatalf("the command did not print the value: sha256 %q", got)
		}
	})

	t.Run("terminal", func(t *testing.T) {
		res, err := a.ExecWait(ctx, sb.ID, api.CreateCommandRequest{
			Command: `printf '%s\n' "$TOKEN"; printf 'tok'`, PTY: &api.PTY{Cols: 80, Rows: 24},
		})
		if err != nil {
			t.Fatal(err)
		}
		if res.Stdout != "[secret:tok]\r\ntok" {
			t.Fatalf("terminal stdout %q", res.Stdout)
		}
	})

	// A value printed in two pieces with a pause under a terminal (shorter
	// than its flush delay, and far longer: all but the last byte, then a
	// pause of twice the delay), and split between stdout and stderr:
	// neither the value nor its pieces, nor any secrets.KeepPartial bytes
	// of it, are recorded.
	pieces := map[string]struct {
		command string
		pty     bool
		want    map[string]string
	}{
		"terminal with a pause": {
			command: `printf %s "$TOKEN" | head -c 10; sleep 0.3; printf %s "$TOKEN" | tail -c +11`, pty: true,
			want: map[string]string{"ndjson": "[secret:tok]", "raw stdout": "[secret:tok]", "raw stderr": "", "attach replay": "[secret:tok]"},
		},
		"terminal with a long pause": {
			command: fmt.Sprintf(`printf %%s "$TOKEN" | head -c %d; sleep 2; printf %%s "$TOKEN" | tail -c +%d`, len(value)-1, len(value)), pty: true,
			want: map[string]string{"ndjson": "[secret:tok]", "raw stdout": "[secret:tok]", "raw stderr": "", "attach replay": "[secret:tok]"},
		},
		"across stdout and stderr": {
			// A second between the pieces so that the agent reads them in
			// the order they were written: redaction follows that order.
			command: `printf %s "$TOKEN" | head -c 10; sleep 1; printf %s "$TOKEN" | tail -c +11 >&2; echo >&2`,
			want:    map[string]string{"ndjson": "[secret:tok]\n", "raw stdout": "[secret:tok]", "raw stderr": "\n", "attach replay": "[secret:tok]\n"},
		},
	}
	for name, tc := range pieces {
		t.Run(name, func(t *testing.T) {
			req := api.CreateCommandRequest{Command: tc.command}
			if tc.pty {
				req.PTY = &api.PTY{Cols: 80, Rows: 24}
			}
			res, err := a.ExecWait(ctx, sb.ID, req)
			if err != nil {
				t.Fatal(err)
			}
			v := bothViews(t, s, a, keyA, sb.ID, res.Command.ID)
			for view, want := range tc.want {
				got := v[view]
				if strings.Contains(got, value) || strings.Contains(got, value[:10]) || strings.Contains(got, value[10:]) {
					t.Errorf("%s: a piece of the value is in %q", view, got)
				}
				// Between replacements (the value's own prefix has
				// "secret" in it, as they do), no KeepPartial bytes of it.
				for _, clear := range strings.Split(got, "[secret:tok]") {
					for i := 0; i+secrets.KeepPartial <= len(value); i++ {
						if piece := value[i : i+secrets.KeepPartial]; strings.Contains(clear, piece) {
							t.Errorf("%s: %q of the value is in %q", view, piece, got)
							break
						}
					}
				}
				if got != want {
					t.Errorf("%s: %q; want %q", view, got, want)
				}
			}
		})
	}

	t.Run("another team", func(t *testing.T) {
		if _, err := b.GetSecret(ctx, "tok"); api.ErrorCode(err) != api.CodeNotFound {
			t.Errorf("team b get: %v; want not_found", err)
		}
		if err := b.DeleteSecret(ctx, "tok"); api.ErrorCode(err) != api.CodeNotFound {
			t.Errorf("team b delete: %v; want not_found", err)
		}
		if l, err := b.ListSecrets(ctx, 0, ""); err != nil || len(l.Items) != 0 {
			t.Errorf("team b lists %v, %v", l.Items, err)
		}
		_, err := b.CreateSandbox(ctx, api.CreateSandboxRequest{Name: "steal", Secrets: map[string]api.SecretRef{"T": {Secret: "tok"}}}, false)
		if api.ErrorCode(err) != api.CodeNotFound {
			t.Fatalf("team b create with team a's secret: %v; want not_found", err)
		}
		if l, _ := b.ListSandboxes(ctx, cove.SandboxQuery{}); len(l.Items) != 0 {
			t.Errorf("team b has sandboxes after a refused create: %v", l.Items)
		}
		if _, err := b.Exec(ctx, sb.ID, api.CreateCommandRequest{Command: "true"}); api.ErrorCode(err) != api.CodeNotFound {
			t.Errorf("team b exec in team a's sandbox: %v; want not_found", err)
		}
		// Team b's own secret of that name is its own.
		if _, err := b.PutSecret(ctx, "tok", "team-b-value-0123456789"); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256([]byte(value))
		if got := e2etest.MustOK(t, a, sb.ID, `printf %s "$TOKEN" | sha256sum`); !strings.HasPrefix(got, hex.EncodeToString(sum[:])) {
			t.Errorf("team a's command got another value after team b's put")
		}
	})

	t.Run("nothing in the data dir", func(t *testing.T) {
		found := scanDataDir(t, s.DataDir, value, "[secret:tok]", value[:10])
		if len(found[value]) > 0 {
			t.Errorf("the value is in %v", found[value])
		}
		if len(found["[secret:tok]"]) == 0 {
			t.Errorf("the scan found no redacted output: it does not read what it should")
		}
		if strings.Contains(s.Tail(1<<30), value) {
			t.Errorf("the value is in the server's log")
		}
	})

	t.Run("updated and rotated", func(t *testing.T) {
		value2 := randomValue(t, "cove-e2e-second-")
		if _, err := a.PutSecret(ctx, "tok", value2); err != nil {
			t.Fatal(err)
		}
		sum2 := sha256.Sum256([]byte(value2))
		check := func(what string) {
			t.Helper()
			if got := e2etest.MustOK(t, a, sb.ID, `printf %s "$TOKEN" | sha256sum`); !strings.HasPrefix(got, hex.EncodeToString(sum2[:])) {
				t.Fatalf("%s: the command did not get the current value (sha256 %q)", what, got)
			}
			res := e2etest.Sh(t, a, sb.ID, `echo "$TOKEN"`)
			if res.Stdout != "[secret:tok]\n" {
				t.Fatalf("%s: stdout %q", what, res.Stdout)
			}
		}
		check("after the update")

		// Rotate: a new key, the old one given once to seal everything again.
		oldKey := filepath.Join(s.DataDir, "secrets.key")
		newKey := filepath.Join(t.TempDir(), "new.key")
		kb, _ := secrets.GenerateKey()
		if err := os.WriteFile(newKey, kb, 0o600); err != nil {
			t.Fatal(err)
		}
		// A command that prints the value only after the restart: the
		// restarted node must know the sandbox's values again.
		waiting, err := a.Exec(ctx, sb.ID, api.CreateCommandRequest{
			Command: `while [ ! -e /tmp/go ]; do sleep 0.1; done; echo "$TOKEN"`,
		})
		if err != nil {
			t.Fatal(err)
		}
		base := append([]string(nil), s.Args...)
		s.Stop(syscall.SIGTERM)
		s.Args = append(append([]string(nil), base...), "--secrets-key-file", newKey, "--secrets-old-key-file", oldKey)
		s.Start()
		if !strings.Contains(s.Tail(1<<20), "secrets sealed again under the current key") {
			t.Errorf("the server did not say it sealed the secrets again")
		}
		check("after the rotation")
		e2etest.MustOK(t, a, sb.ID, "touch /tmp/go")
		v := views(t, s, a, keyA, sb.ID, waiting.ID)
		checkViews(t, "printed after the restart", v, "[secret:tok]\n", value2)

		// The old key is no longer needed; without the new one the server
		// refuses to start rather than run with secrets it cannot open.
		s.Stop(syscall.SIGTERM)
		s.Args = append(append([]string(nil), base...), "--secrets-key-file", newKey)
		s.Start()
		check("with the new key alone")
		s.Stop(syscall.SIGTERM)
		rctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		cmd := exec.CommandContext(rctx, filepath.Join(e2etest.BinDir(), "cove"), base...)
		cmd.Env = append(os.Environ(), "HOME="+s.Home)
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "--secrets-old-key-file") {
			t.Errorf("a server with the old key only: %v\n%s", err, out)
		}
		s.Args = append(append([]string(nil), base...), "--secrets-key-file", newKey)
		s.Start()

		if err := a.DeleteSecret(ctx, "tok"); err != nil {
			t.Fatal(err)
		}
		_, err = a.Exec(ctx, sb.ID, api.CreateCommandRequest{Command: "true"})
		if api.ErrorCode(err) != api.CodeNotFound || !strings.Contains(err.Error(), "tok") {
			t.Errorf("exec after the secret was deleted: %v; want not_found naming it", err)
		}
	})
}
