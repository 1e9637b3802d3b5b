package fleetscale_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/fleet"
	"github.com/cove-dev/cove/internal/control/fleet/join"
	"github.com/cove-dev/cove/internal/control/fleet/join/jointest"
	"github.com/cove-dev/cove/internal/control/fleet/remote"
	"github.com/cove-dev/cove/internal/fleet/fleetwire"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/node/membership"
	"github.com/cove-dev/cove/internal/node/nodeapi"
	"github.com/cove-dev/cove/internal/node/nodetest"
	"github.com/cove-dev/cove/internal/secrets"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/internal/store/postgres"
	"github.com/cove-dev/cove/internal/store/sqlite"
	"github.com/cove-dev/cove/internal/testsupport/pgserver"
)

// The fleet measured.
const (
	fleetNodes = 100
	// clients is how many creates are in flight at once.
	clients = 32
	// sandboxCPUs and sandboxMiB are what each sandbox reserves.
	sandboxCPUs = 1
	sandboxMiB  = 1024
)

var quiet = slog.New(slog.DiscardHandler)

// sharedStore is one store opened for every replica: Open opens the same
// database again, as another replica would.
type sharedStore struct {
	name string
	open func(t testing.TB) store.Store
}

// stores are the stores the measure runs on: SQLite, and PostgreSQL
// where its binaries are (a throwaway cluster; COVE_REQUIRE_PG=1 makes
// their absence a failure).
func stores(t testing.TB) []sharedStore {
	dir := t.TempDir()
	ss := []sharedStore{{name: "sqlite", open: func(t testing.TB) store.Store {
		// One process's replicas share the one write connection SQLite
		// allows: a second handle on the file would only wait for it.
		return openSQLite(t, filepath.Join(dir, "cove.db"))
	}}}
	if pgserver.BinDir() == "" && os.Getenv("COVE_REQUIRE_PG") != "1" {
		t.Log("no PostgreSQL binaries: measuring on SQLite alone")
		return ss
	}
	var url string
	return append(ss, sharedStore{name: "postgres", open: func(t testing.TB) store.Store {
		// Each replica opens its own pool on one database, as separate
		// processes do.
		if url == "" {
			url = pgserver.Start(t).NewDatabase(t)
		}
		db, err := postgres.Open(context.Background(), url, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}})
}

var (
	sqliteMu sync.Mutex
	sqliteDB = map[string]*sqlite.DB{}
)

func openSQLite(t testing.TB, path string) store.Store {
	t.Helper()
	sqliteMu.Lock()
	defer sqliteMu.Unlock()
	if db := sqliteDB[path]; db != nil {
		return db
	}
	db, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	sqliteDB[path] = db
	t.Cleanup(func() {
		sqliteMu.Lock()
		delete(sqliteDB, path)
		sqliteMu.Unlock()
		db.Close()
	})
	return db
}

// replica is one control replica: a fleet and its node listener.
type replica struct {
	fl  *fleet.Fleet
	js  *join.Service
	url string
	// stop closes the replica's node listener.
	stop func()
}

// startReplica starts a replica over st until the end of the test; lead
// runs loss detection on it.
func startReplica(t testing.TB, st store.Store, ring *secrets.Keyring, lead bool) *replica {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	r := &replica{}
	fl, err := fleet.New(fleet.Config{
		Store: st,
		Dial: func(nodeID, addr string) (fleet.NodeClient, error) {
			c := remote.New(remote.Config{NodeID: nodeID, Addr: addr, TLS: r.js.NodeClientTLS(nodeID), Log: quiet})
			wg.Go(func() { c.Run(ctx) })
			return c, nil
		},
		LostAfter: 15 * time.Second,
		Log:       quiet,
	})
	if err != nil {
		t.Fatal(err)
	}
	r.fl = fl
	r.js, err = join.New(ctx, join.Config{DataDir: t.TempDir(), HeartbeatInterval: 3 * time.Second},
		join.Deps{Store: st, Keyring: ring, Registry: fl, Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := fl.Load(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Go(func() { fl.Run(ctx) })
	if lead {
		wg.Go(func() { fl.RunLossDetection(ctx) })
	}
	r.url, r.stop = jointest.ServeService(t, r.js)
	return r
}

// fakeNode is an in-memory node serving the real node API over mTLS,
// joined through the real join protocol.
type fakeNode struct {
	name string
	n    *nodetest.Node
}

// startNode joins a node of cpus CPUs to the control addresses, serves
// its API and heartbeats until the end of the test.
func startNode(t testing.TB, name, tokenFile string, controls []string, cpus float64) *fakeNode {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nd := nodetest.New()
	napi := nodeapi.New(nd, quiet)
	nd.OnExit = napi.OnExit
	m := membership.New(membership.Config{
		Controls: controls, TokenFile: tokenFile, Name: name, Addr: ln.Addr().String(),
		Dir: filepath.Join(t.TempDir(), name), Log: quiet,
		// A join that times out is sent again to the other replica, which
		// refuses a name the first attempt registered: on a host this
		// busy (100 joins at once), wait for the answer.
		CallTimeout: 30 * time.Second,
		Report: func(ctx context.Context) (fleetwire.Heartbeat, error) {
			return fleetwire.Heartbeat{Capacity: fleetwire.Capacity{CPUs: cpus, MemoryMiB: int64(cpus * sandboxMiB)},
				Templates: []string{"managed"}}, nil
		},
	})
	ctx, cancel := context.WithCancel(context.Background())
	if _, err := m.Join(ctx); err != nil {
		cancel()
		ln.Close()
		t.Fatalf("join %s: %v", name, err)
	}
	srv := napi.HTTPServer()
	srv.TLSConfig = m.ServerTLS()
	var wg sync.WaitGroup
	wg.Go(func() { srv.Serve(tls.NewListener(ln, srv.TLSConfig)) })
	wg.Go(func() { m.Run(ctx, func(context.Context, fleetwire.Admission) error { return nil }) })
	t.Cleanup(func() {
		cancel()
		napi.Close()
		srv.Close()
		wg.Wait()
		nd.Close()
	})
	return &fakeNode{name: name, n: nd}
}

// cluster is the fleet measured: replicas over one store and the nodes.
type cluster struct {
	st       store.Store
	replicas []*replica
	nodes    []*fakeNode
	cpus     float64 // each node's
}

func startCluster(t testing.TB, ss sharedStore, sandboxes int) *cluster {
	t.Helper()
	ring := jointest.Keyring(t)
	c := &cluster{st: ss.open(t)}
	c.replicas = []*replica{startReplica(t, c.st, ring, true), startReplica(t, ss.open(t), ring, false)}
	tok, _, err := c.replicas[0].js.Token(t.Context())
	if err != nil || tok == "" {
		t.Fatalf("join token: %q %v", tok, err)
	}
	tokenFile := filepath.Join(t.TempDir(), "join-token")
	if err := os.WriteFile(tokenFile, []byte(tok), 0o600); err != nil {
		t.Fatal(err)
	}
	// Room for every sandbox and one more per node: the fleet ends the
	// run nearly full, so nodes refuse placements made from stale views.
	c.cpus = math.Ceil(float64(sandboxes)/fleetNodes)*sandboxCPUs + sandboxCPUs
	nodes := make([]*fakeNode, fleetNodes)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := range fleetNodes {
		// Half the nodes talk to each replica first; each fails over to
		// the other.
		controls := []string{c.replicas[0].url, c.replicas[1].url}
		if i%2 == 1 {
			slices.Reverse(controls)
		}
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			nodes[i] = startNode(t, fmt.Sprintf("node-%03d", i), tokenFile, controls, c.cpus)
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	c.nodes = nodes
	for _, r := range c.replicas {
		if err := r.fl.Refresh(t.Context()); err != nil {
			t.Fatal(err)
		}
		ns, err := r.fl.Nodes(t.Context())
		if err != nil || len(ns) != fleetNodes {
			t.Fatalf("a replica sees %d nodes, %v; want %d", len(ns), err, fleetNodes)
		}
	}
	return c
}

// result is one measure.
type result struct {
	replicas      int
	sandboxes     int
	perSecond     float64
	p50, p99, max time.Duration
}

func (r result) String() string {
	return fmt.Sprintf("%d replica(s): %d creates, %.0f creates/s, p50 %.2f ms, p99 %.2f ms, max %.2f ms",
		r.replicas, r.sandboxes, r.perSecond, ms(r.p50), ms(r.p99), ms(r.max))
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// place creates n sandboxes through the first `use` replicas, in turn,
// clients at a time: each create is the fleet's part of one, the
// placement admitted by the store and the node's Admit and Start over
// mTLS. A watcher checks, while they run, that no node's placements
// exceed its capacity.
func (c *cluster) place(t testing.TB, run string, use, n int) result {
	t.Helper()
	ctx := t.Context()
	watch, stopWatch := context.WithCancel(ctx)
	var wwg sync.WaitGroup
	var overErr atomic.Pointer[error]
	wwg.Go(func() {
		for watch.Err() == nil {
			if err := c.checkCapacity(watch); err != nil && watch.Err() == nil {
				overErr.Store(&err)
				return
			}
			select {
			case <-watch.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	})
	lat := make([]time.Duration, n)
	errs := make([]error, n)
	var next atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				fl := c.replicas[i%use].fl
				spec := node.SandboxSpec{ID: fmt.Sprintf("sbx_%s_%05d", run, i), Template: "managed",
					Resources: api.Resources{CPUs: sandboxCPUs, MemoryMiB: sandboxMiB}}
				t0 := time.Now()
				err := fl.Admit(ctx, spec)
				if err == nil {
					err = fl.Start(ctx, spec)
				}
				lat[i], errs[i] = time.Since(t0), err
			}
		})
	}
	wg.Wait()
	wall := time.Since(start)
	stopWatch()
	wwg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("creates through %d replica(s): %v", use, firstLine(err))
	}
	if p := overErr.Load(); p != nil {
		t.Fatal(*p)
	}
	if err := c.checkCapacity(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.checkNodes(ctx, n); err != nil {
		t.Fatal(err)
	}
	slices.Sort(lat)
	return result{replicas: use, sandboxes: n, perSecond: float64(n) / wall.Seconds(),
		p50: lat[n/2], p99: lat[(n*99)/100], max: lat[n-1]}
}

func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}

// checkCapacity reads every placement from the store: no node may hold
// more than its capacity.
func (c *cluster) checkCapacity(ctx context.Context) error {
	ps, err := c.st.ListPlacements(ctx, "")
	if err != nil {
		return err
	}
	held := map[string]float64{}
	for _, p := range ps {
		held[p.NodeID] += p.Resources.CPUs
	}
	for id, cpus := range held {
		if id != "" && cpus > c.cpus+1e-9 {
			return fmt.Errorf("node %s holds %g CPUs of %g", id, cpus, c.cpus)
		}
	}
	return nil
}

// checkNodes asks the nodes themselves: together they run n sandboxes,
// none more than it has room for, and every node is still ready.
func (c *cluster) checkNodes(ctx context.Context, n int) error {
	total := 0
	for _, nd := range c.nodes {
		ids, err := nd.n.Known(ctx)
		if err != nil {
			return err
		}
		if float64(len(ids))*sandboxCPUs > c.cpus {
			return fmt.Errorf("node %s runs %d sandboxes of %g CPUs with %g", nd.name, len(ids), float64(sandboxCPUs), c.cpus)
		}
		total += len(ids)
	}
	if total != n {
		return fmt.Errorf("the nodes run %d sandboxes; %d were created", total, n)
	}
	ns, err := c.replicas[0].fl.Nodes(ctx)
	if err != nil {
		return err
	}
	for _, nd := range ns {
		if nd.State != api.NodeReady {
			return fmt.Errorf("node %s is %s", nd.Name, nd.State)
		}
	}
	return nil
}

// clear destroys every sandbox of a run, through the first replica.
func (c *cluster) clear(t testing.TB, run string, n int) {
	t.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	for range clients {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := c.replicas[0].fl.Destroy(t.Context(), fmt.Sprintf("sbx_%s_%05d", run, i)); err != nil {
					failed.Store(&err)
				}
			}
		})
	}
	wg.Wait()
	if p := failed.Load(); p != nil {
		t.Fatal(*p)
	}
}

// measure places n sandboxes through one replica, clears them, then
// places n through two, on the same fleet in the same run. A first round,
// not measured, through both replicas, opens every replica's connection
// to every node (the first call of each pays its TLS handshake) and warms
// the store, so that neither measure pays for it.
func measure(t testing.TB, ss sharedStore, n int) (one, two result) {
	c := startCluster(t, ss, n)
	warm := 4 * fleetNodes
	c.place(t, "warm", 2, warm)
	c.clear(t, "warm", warm)
	one = c.place(t, "one", 1, n)
	c.clear(t, "one", n)
	two = c.place(t, "two", 2, n)
	return one, two
}

// TestControlScale is the scale measure, small: 500 sandboxes on 100
// fake nodes through one replica, then through two.
func TestControlScale(t *testing.T) {
	if testing.Short() {
		t.Skip("the scale measure does not run with -short")
	}
	for _, ss := range stores(t) {
		t.Run(ss.name, func(t *testing.T) {
			one, two := measure(t, ss, 500)
			t.Log(one)
			t.Log(two)
		})
	}
}

// BenchmarkControlScale is the scale measure in full: 10,000 sandboxes on
// 100 fake nodes, through one replica and then two, in the same run.
func BenchmarkControlScale(b *testing.B) {
	for _, ss := range stores(b) {
		b.Run(ss.name, func(b *testing.B) {
			var one, two result
			for b.Loop() {
				one, two = measure(b, ss, 10_000)
			}
			b.Log(one)
			b.Log(two)
			b.ReportMetric(one.perSecond, "one-creates/s")
			b.ReportMetric(ms(one.p50), "one-p50-ms")
			b.ReportMetric(ms(one.p99), "one-p99-ms")
			b.ReportMetric(two.perSecond, "two-creates/s")
			b.ReportMetric(ms(two.p50), "two-p50-ms")
			b.ReportMetric(ms(two.p99), "two-p99-ms")
		})
	}
}
