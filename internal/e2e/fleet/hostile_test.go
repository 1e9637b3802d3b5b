package fleet

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
	"github.com/cove-dev/cove/internal/fleet/fleetwire"
)

// nodeIdentity is the certificate and key a node keeps in its data dir:
// what an attacker who took that host holds.
func nodeIdentity(t *testing.T, n *e2etest.Node) tls.Certificate {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(n.DataDir, "fleet", "node.pem"))
	if err != nil {
		t.Fatal(err)
	}
	var certPEM, keyPEM []byte
	for rest := b; ; {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			break
		}
		if strings.Contains(blk.Type, "PRIVATE KEY") {
			keyPEM = append(keyPEM, pem.EncodeToMemory(blk)...)
		} else {
			certPEM = append(certPEM, pem.EncodeToMemory(blk)...)
		}
	}
	c, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func tlsClient(certs ...tls.Certificate) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		InsecureSkipVerify: true, // the tests check what the servers refuse, not whom the client trusts
		Certificates:       certs,
	}}}
}

func post(c *http.Client, url, body string) (int, string, error) {
	resp, err := c.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

// TestHostile: a node's credentials cannot drive another node's
// sandboxes nor act as another node; a client that is not a node cannot
// join without the token; plain HTTP is refused on both listeners.
func TestHostile(t *testing.T) {
	// No warm pool: the victim is created on the node left undrained,
	// not taken from a sandbox warmed on either.
	f := e2etest.StartFleet(t, e2etest.FleetControlArgs("--warm-pool", "0"))
	c := f.Control.Admin
	a, b := f.Node("node-a"), f.Node("node-b")
	admin(t, f, "POST", "/v1/nodes/node-a/drain")
	victim := e2etest.Create(t, c, api.CreateSandboxRequest{Name: "victim"})
	admin(t, f, "POST", "/v1/nodes/node-a/undrain")
	if nodeOf(t, f, victim.ID) != "node-b" {
		t.Fatal("the victim is not on node-b")
	}
	stolen := nodeIdentity(t, a)
	nodeAPI := "https://" + b.Addr() + "/node/v1/"

	t.Run("a node's certificate on another node's API", func(t *testing.T) {
		for _, path := range []string{"known", "exec", "read-file", "destroy"} {
			code, body, err := post(tlsClient(stolen), nodeAPI+path, `{"sandbox":"`+victim.ID+`","id":"`+victim.ID+`"}`)
			if err == nil && code/100 == 2 {
				t.Fatalf("node-a's certificate called %s on node-b: %d %s", path, code, body)
			}
		}
		if got := e2etest.MustOK(t, c, victim.ID, "echo alive"); got != "alive\n" {
			t.Fatalf("the victim after the attempts: %q", got)
		}
	})
	t.Run("no certificate on a node's API", func(t *testing.T) {
		code, body, err := post(tlsClient(), nodeAPI+"known", `{}`)
		if err == nil && code/100 == 2 {
			t.Fatalf("a client without a certificate called node-b: %d %s", code, body)
		}
	})
	t.Run("a node's certificate acts only as itself", func(t *testing.T) {
		hb, _ := json.Marshal(fleetwire.Heartbeat{Epoch: 1})
		// The listener takes the node from the certificate: node-a's
		// heartbeat can never be counted as node-b's, and node-a's
		// registration can never take node-b's name.
		reg, _ := json.Marshal(fleetwire.Registration{Name: "node-b", Addr: "127.0.0.1:1"})
		code, body, err := post(tlsClient(stolen), "https://"+f.NodeListen()+fleetwire.PathRegister, string(reg))
		if err == nil && code/100 == 2 && strings.Contains(body, `"node_id"`) {
			var adm fleetwire.Admission
			json.Unmarshal([]byte(body), &adm)
			if adm.NodeID != f.WaitNode("node-a", "ready").ID {
				t.Fatalf("node-a's certificate registered as another node: %s", body)
			}
		}
		_ = hb
		if got := f.WaitNode("node-b", "ready"); got.Addr != b.Addr() {
			t.Fatalf("node-b's address changed to %s", got.Addr)
		}
		if got := e2etest.MustOK(t, c, victim.ID, "echo still"); got != "still\n" {
			t.Fatalf("the victim: %q", got)
		}
	})
	t.Run("join without the token", func(t *testing.T) {
		for _, token := range []string{"", "cove-join-0000-guess", strings.Repeat("x", 80)} {
			body, _ := json.Marshal(fleetwire.JoinRequest{Token: token, Registration: fleetwire.Registration{Name: "intruder", Addr: "127.0.0.1:1"}})
			code, resp, err := post(tlsClient(), "https://"+f.NodeListen()+fleetwire.PathJoin, string(body))
			if err == nil && code/100 == 2 {
				t.Fatalf("joined with token %q: %d %s", token, code, resp)
			}
		}
		for _, n := range f.ListNodes() {
			if n.Name == "intruder" {
				t.Fatalf("an intruder is listed: %+v", n)
			}
		}
		// And a real node process refused at join leaves nothing behind.
		bad := filepath.Join(t.TempDir(), "bad-token")
		os.WriteFile(bad, []byte("cove-join-"+strings.Repeat("ab", 32)+"-wrong\n"), 0o600)
		n := f.AddNodeNoWait("intruder", bad)
		if code := n.Wait(time.Minute); code == 0 {
			t.Fatal("a node with a wrong token exited 0")
		}
		if out, _ := exec.Command("nft", "list", "table", "inet", n.Table).CombinedOutput(); !bytes.Contains(out, []byte("No such file")) {
			t.Fatalf("a refused node left its nft table: %s", out)
		}
		if dirs, _ := filepath.Glob("/sys/fs/cgroup/*" + n.Cgroup); len(dirs) != 0 {
			t.Fatalf("a refused node left cgroups: %v", dirs)
		}
	})
	t.Run("plain HTTP", func(t *testing.T) {
		for _, addr := range []string{f.NodeListen(), b.Addr()} {
			resp, err := http.Get("http://" + addr + "/")
			if err == nil {
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "HTTPS") {
					t.Fatalf("plain HTTP to %s: %d %q", addr, resp.StatusCode, body)
				}
			}
		}
	})
	_ = context.Background
}
