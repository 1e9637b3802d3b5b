package replicas

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
	"github.com/cove-dev/cove/internal/fleet/pki"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/internal/store/postgres"
	"github.com/cove-dev/cove/internal/testsupport/pgserver"
)

// lossyProxy stands in front of one replica's node listener and loses
// its answers: it passes TCP both ways until the client finished its TLS
// handshake (its first encrypted record), then passes the client's bytes
// (the request) on and drops what the replica sends back, and cuts the
// client's connection once cut says the replica acted on the request. To
// the node it is a replica that died after doing the work.
type lossyProxy struct {
	ln       net.Listener
	upstream string
	cut      func() bool

	wg      sync.WaitGroup
	conns   atomic.Int32 // connections taken
	cuts    atomic.Int32 // connections cut after the replica acted
	dropped atomic.Int64 // bytes of answers dropped
}

func startLossyProxy(t *testing.T, upstream string, cut func() bool) *lossyProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &lossyProxy{ln: ln, upstream: upstream, cut: cut}
	p.wg.Go(p.accept)
	t.Cleanup(func() {
		ln.Close()
		p.wg.Wait()
	})
	return p
}

func (p *lossyProxy) addr() string { return p.ln.Addr().String() }

func (p *lossyProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.conns.Add(1)
		p.wg.Go(func() { p.serve(c) })
	}
}

func (p *lossyProxy) serve(client net.Conn) {
	defer client.Close()
	up, err := net.Dial("tcp", p.upstream)
	if err != nil {
		return
	}
	defer up.Close()
	var handshaken atomic.Bool
	done := make(chan struct{})
	var once sync.Once
	stop := func() { once.Do(func() { close(done); client.Close(); up.Close() }) }
	var wg sync.WaitGroup
	defer wg.Wait()
	// Client to replica, record by record: the first application-data
	// record (23) is the client's encrypted Finished, after which the
	// replica's whole handshake flight has been passed on.
	wg.Go(func() {
		defer stop()
		hdr := make([]byte, 5)
		for {
			if _, err := io.ReadFull(client, hdr); err != nil {
				return
			}
			body := make([]byte, int(hdr[3])<<8|int(hdr[4]))
			if _, err := io.ReadFull(client, body); err != nil {
				return
			}
			if hdr[0] == 23 {
				handshaken.Store(true)
			}
			if _, err := up.Write(append(hdr, body...)); err != nil {
				return
			}
		}
	})
	// Replica to client: passed on during the handshake, dropped after.
	wg.Go(func() {
		defer stop()
		buf := make([]byte, 32<<10)
		for {
			n, err := up.Read(buf)
			if n > 0 {
				if handshaken.Load() {
					p.dropped.Add(int64(n))
				} else if _, err := client.Write(buf[:n]); err != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	})
	// Cut the client once the replica acted on its request.
	wg.Go(func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			if handshaken.Load() && p.cut() {
				p.cuts.Add(1)
				stop()
				return
			}
		}
	})
	<-done
}

// listsNode says whether a replica's GET /v1/nodes lists a node of that
// name (false on any error: asked again).
func listsNode(c *e2etest.Server, name string) bool {
	req, err := http.NewRequest("GET", c.URL+"/v1/nodes", nil)
	if err != nil {
		return false
	}
	req.Header.Set("Authorization", "Bearer "+c.AdminKey)
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var l struct {
		Items []api.Node `json:"items"`
	}
	if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(&l) != nil {
		return false
	}
	for _, n := range l.Items {
		if n.Name == name {
			return true
		}
	}
	return false
}

// storedNodes are the node rows named name in the fleet's database, as
// the store reads them.
func storedNodes(t *testing.T, st *postgres.DB, name string) []store.Node {
	t.Helper()
	rows, err := st.ListNodes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []store.Node
	for _, n := range rows {
		if n.Name == name {
			out = append(out, n)
		}
	}
	return out
}

// TestJoinAnswerLost: a node's first join reaches replica A, which
// registers it, but the answer never comes back (the connection is cut
// after A acted); the node tries replica B with the same join nonce and
// is admitted as the node A registered: one row, a node that takes
// sandboxes. Its first heartbeat spends the nonce. Another host that
// joins with the same name (and so another nonce), or with a copy of the
// node's spent nonce, is refused with a clear error and disturbs nothing.
func TestJoinAnswerLost(t *testing.T) {
	e2etest.RequireRoot(t)
	pg := pgserver.Start(t)
	dbURL := pg.NewDatabase(t)
	f := e2etest.StartFleet(t, e2etest.FleetStore(dbURL), e2etest.FleetReplicas(2), e2etest.FleetNodes(0),
		e2etest.FleetLostAfter(20*time.Second), e2etest.FleetControlArgs("--warm-pool", "0"))
	st, err := postgres.Open(context.Background(), dbURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	a, b := f.Controls[0], f.Controls[1]
	const name = "node-x"

	proxy := startLossyProxy(t, a.Listeners()["node"], func() bool { return listsNode(a, name) })
	// The node tries A (through the proxy) first, then B.
	n := f.AddNodeVia(name, []string{"https://" + proxy.addr(), "https://" + b.Listeners()["node"]})
	f.WaitNode(name, "ready")

	if proxy.cuts.Load() == 0 || proxy.dropped.Load() == 0 {
		t.Fatalf("the proxy cut %d connections and dropped %d bytes: the first join did not go through A and lose its answer",
			proxy.cuts.Load(), proxy.dropped.Load())
	}
	rows := storedNodes(t, st, name)
	if len(rows) != 1 {
		t.Fatalf("nodes named %s in the store: %+v; want exactly one", name, rows)
	}
	row := rows[0]
	// A registered it (epoch 1), B registered the same row again.
	if row.State != api.NodeReady || row.Epoch < 2 {
		t.Fatalf("the node's row: %+v; want ready, registered twice", row)
	}
	nonce, err := os.ReadFile(filepath.Join(n.DataDir, "fleet", "join-nonce"))
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(filepath.Join(n.DataDir, "fleet", "join-nonce")); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("the join nonce file: %v, %v; want mode 0600", st.Mode().Perm(), err)
	}
	if _, err := pki.ParseJoinNonce(string(nonce)); err != nil {
		t.Fatalf("the join nonce file: %v", err)
	}
	if id, _ := os.ReadFile(filepath.Join(n.DataDir, "fleet", "node-id")); strings.TrimSpace(string(id)) != row.ID {
		t.Fatalf("the node holds identity %q; the store's row is %s", id, row.ID)
	}
	if !strings.Contains(b.Tail(64<<20), "node joins again with its join nonce") {
		t.Fatalf("replica B did not admit the node again by its nonce:\n%s", b.Tail(4000))
	}

	// Its first heartbeat spent the nonce: only its certificate speaks
	// for it now.
	waitFor(t, time.Minute, "the join nonce spent", func() (bool, string) {
		rows := storedNodes(t, st, name)
		return len(rows) == 1 && rows[0].JoinHash == "", fmt.Sprintf("%+v", rows)
	})

	// It takes sandboxes, through either replica.
	ctx := context.Background()
	var ids []string
	for i, c := range []*e2etest.Server{a, b} {
		sb, err := c.Admin.CreateSandbox(ctx, api.CreateSandboxRequest{Name: "after-join-" + string(rune('a'+i))}, true)
		if err != nil {
			t.Fatalf("create through %s: %v", c.URL, err)
		}
		if sb.Node == nil || sb.Node.ID != row.ID {
			t.Fatalf("sandbox %s placed on %+v; want %s", sb.ID, sb.Node, row.ID)
		}
		if got := e2etest.MustOK(t, c.Admin, sb.ID, "echo placed"); got != "placed\n" {
			t.Fatalf("exec on the joined node: %q", got)
		}
		ids = append(ids, sb.ID)
	}

	// Another host with the join token and the same name, but its own
	// data dir (another nonce), is refused and disturbs nothing.
	twin := f.AddNodeNoWait(name, f.JoinTokenFile())
	if code := twin.Wait(time.Minute); code == 0 {
		t.Fatalf("a second host joined as %s:\n%s", name, twin.Tail(4000))
	}
	if out := twin.Tail(4000); !strings.Contains(out, `a node named "`+name+`" is already registered`) {
		t.Fatalf("the twin's refusal does not say why:\n%s", out)
	}
	// A host that got hold of the node's nonce (a copy of its data dir)
	// and the token is refused too: the nonce was spent.
	thief := f.AddNodeSeededNoWait(name, func(dir string) {
		if err := os.MkdirAll(filepath.Join(dir, "fleet"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "fleet", "join-nonce"), nonce, 0o600); err != nil {
			t.Fatal(err)
		}
	})
	if code := thief.Wait(time.Minute); code == 0 {
		t.Fatalf("a host with the node's spent nonce joined as %s:\n%s", name, thief.Tail(4000))
	}
	if out := thief.Tail(4000); !strings.Contains(out, `a node named "`+name+`" is already registered`) {
		t.Fatalf("the refusal of the spent nonce does not say why:\n%s", out)
	}
	after := storedNodes(t, st, name)
	if len(after) != 1 || after[0].ID != row.ID || after[0].Epoch != row.Epoch || after[0].State != api.NodeReady ||
		after[0].Addr != row.Addr {
		t.Fatalf("after the twin's join, nodes named %s: %+v; want %+v untouched", name, after, row)
	}
	for _, id := range ids {
		if got := e2etest.MustOK(t, b.Admin, id, "echo still"); got != "still\n" {
			t.Fatalf("sandbox %s after the twin's join: %q", id, got)
		}
	}
	if n.PID() == 0 {
		t.Fatalf("the joined node exited:\n%s", n.Tail(4000))
	}
}
