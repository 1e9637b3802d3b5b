package hostguard

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
)

// asNobody runs argv as the host's nobody (65534, no groups) and returns
// its combined output and whether it succeeded.
func asNobody(t *testing.T, argv ...string) (string, bool) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
	cmd.Dir = "/"
	out, err := cmd.CombinedOutput()
	return string(out), err == nil
}

// TestHostFilesPrivate: another user of the host can read neither a
// sandbox's state directory and root filesystem nor the database, the
// recorded output or the admin key.
func TestHostFilesPrivate(t *testing.T) {
	s := e2etest.StartServer(t)
	sb := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{})
	e2etest.MustOK(t, s.Admin, sb.ID, "echo hostguard-secret > /workspace/secret && echo recorded")

	state := filepath.Join(s.DataDir, "sandboxes", sb.ID)
	// The control: nobody reaches the data dir and reads what is public.
	if out, ok := asNobody(t, "cat", filepath.Join(s.DataDir, "ready.json")); !ok {
		t.Fatalf("nobody cannot read the ready file, so this test proves nothing: %s", out)
	}
	for _, argv := range [][]string{
		{"ls", filepath.Join(s.DataDir, "sandboxes")},
		{"ls", state},
		{"ls", filepath.Join(state, "rootfs")},
		{"ls", filepath.Join(state, "rootfs", "workspace")},
		{"cat", filepath.Join(state, "rootfs", "workspace", "secret")},
		{"ls", filepath.Join(state, "disk", "upper")},
		{"cat", filepath.Join(state, "disk", "upper", "workspace", "secret")},
		{"cat", filepath.Join(state, "config.json")},
		{"ls", filepath.Join(s.DataDir, "output")},
		{"ls", filepath.Join(s.DataDir, "output", sb.ID)},
		{"ls", filepath.Join(s.DataDir, "saves")},
		{"cat", filepath.Join(s.DataDir, "cove.db")},
		{"cat", filepath.Join(s.DataDir, "admin-api-key")},
	} {
		if out, ok := asNobody(t, argv...); ok {
			t.Errorf("as nobody, %s succeeded: %q", strings.Join(argv, " "), out)
		}
	}
	for _, name := range []string{"cove.db", "cove.db-wal", "cove.db-shm"} {
		st, err := os.Stat(filepath.Join(s.DataDir, name))
		if err != nil {
			t.Error(err)
			continue
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", name, st.Mode().Perm())
		}
	}
}

// TestRootfsMountsNosuidNodev: the sandbox's disk and its overlay root
// are mounted nosuid and nodev, as the host's mount table shows.
func TestRootfsMountsNosuidNodev(t *testing.T) {
	s := e2etest.StartServer(t)
	sb := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{})
	state := filepath.Join(s.DataDir, "sandboxes", sb.ID)
	want := map[string]bool{filepath.Join(state, "rootfs"): false, filepath.Join(state, "disk"): false}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mountpoint options ...
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 {
			continue
		}
		if _, ok := want[fields[4]]; !ok {
			continue
		}
		want[fields[4]] = true
		opts := "," + fields[5] + ","
		for _, o := range []string{"nosuid", "nodev"} {
			if !strings.Contains(opts, ","+o+",") {
				t.Errorf("%s is mounted %s, without %s", fields[4], fields[5], o)
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	for p, seen := range want {
		if !seen {
			t.Errorf("%s is not in the mount table", p)
		}
	}
}

// TestAdminKeyNotInServerOutput: `cove serve` whose output goes to pipes
// (as to a log collector) prints where the admin key is, never the key.
func TestAdminKeyNotInServerOutput(t *testing.T) {
	s := e2etest.StartServer(t)
	out := s.Tail(1 << 30)
	if strings.Contains(out, s.AdminKey) {
		t.Errorf("the server printed the admin key to a pipe:\n%s", out)
	}
	if !strings.Contains(out, filepath.Join(s.DataDir, "admin-api-key")) {
		t.Errorf("the server did not say where the admin key is:\n%s", out)
	}
}

// TestAPIClosesIdleConnections: the API closes a kept-alive connection
// that sends no next request, and refuses oversized headers.
func TestAPIClosesIdleConnections(t *testing.T) {
	s := e2etest.StartServer(t, e2etest.WithArgs("--http-idle-timeout", "300ms"))
	addr := strings.TrimPrefix(s.URL, "http://")

	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	resp := roundTrip(t, c, br, "GET /healthz HTTP/1.1\r\nHost: cove\r\n\r\n")
	if resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("healthz: %s, close %v", resp.Status, resp.Close)
	}
	// The deadline only keeps a server that never closes from hanging the
	// test; what is checked is that the server closed the connection.
	c.SetReadDeadline(time.Now().Add(time.Minute))
	if n, err := br.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("idle kept-alive connection: read %d, %v; want EOF (closed by the server)", n, err)
	}

	c2, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	big := strings.Repeat("a", 256<<10)
	resp = roundTrip(t, c2, bufio.NewReader(c2), "GET /healthz HTTP/1.1\r\nHost: cove\r\nX-Big: "+big+"\r\n\r\n")
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("256 KiB of headers: %s, want 431", resp.Status)
	}
}

func roundTrip(t *testing.T, c net.Conn, br *bufio.Reader, req string) *http.Response {
	t.Helper()
	c.SetDeadline(time.Now().Add(time.Minute))
	io.WriteString(c, req) // a refused request may be cut short: the answer says
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	c.SetDeadline(time.Time{})
	return resp
}
