package remote_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/netpolicy"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/node/nodeapi"
	"github.com/cove-dev/cove/internal/node/nodetest"
)

func spec(id string) node.SandboxSpec {
	return node.SandboxSpec{
		ID: id, Hostname: "h-" + id, Template: node.ManagedTemplate,
		Resources: api.Resources{CPUs: 1, MemoryMiB: 512}, Save: "3-1700000000",
		Secrets: []node.Secret{{Name: "TOKEN", Value: "s3cret"}}, SetID: true,
	}
}

// TestCalls: every JSON call reaches the node with its arguments and
// brings its answer back.
func TestCalls(t *testing.T) {
	f := newFleet(t)
	c, n := f.client, f.node
	ctx := t.Context()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(c.Admit(ctx, spec("sbx_a")))
	must(c.Start(ctx, spec("sbx_a")))
	sb, ok := n.Sandbox("sbx_a")
	if !ok || sb.Spec.Save != "3-1700000000" || sb.Spec.Secrets[0].Value != "s3cret" || sb.Hostname != "h-sbx_a" || !sb.Spec.SetID {
		t.Fatalf("the spec did not arrive whole: %+v", sb)
	}
	must(c.SetHostname(ctx, "sbx_a", "renamed"))
	pol := api.NetworkPolicy{Allow: []string{"example.com"}}
	must(c.SetPolicy("sbx_a", pol))
	c.UseSetupPolicy("sbx_a", true)
	if sb, _ := n.Sandbox("sbx_a"); sb.Hostname != "renamed" || !sb.InSetup || !slices.Equal(sb.Policy.Allow, pol.Allow) {
		t.Fatalf("hostname, policy or setup did not arrive: %+v", sb)
	}
	known, err := c.Known(ctx)
	must(err)
	if !slices.Equal(known, []string{"sbx_a"}) {
		t.Fatalf("known = %v", known)
	}

	n.SetFile("sbx_a", "/w/a.txt", []byte("hello world"))
	st, err := c.StatFile(ctx, "sbx_a", "/w/a.txt")
	must(err)
	if st.Size != 11 || st.Path != "/w/a.txt" {
		t.Fatalf("stat = %+v", st)
	}
	list, err := c.ListFiles(ctx, "sbx_a", node.ListSpec{Path: "/w"})
	must(err)
	if len(list.Items) != 1 || list.Items[0].Name != "a.txt" {
		t.Fatalf("list = %+v", list)
	}
	e, err := c.EditFile(ctx, "sbx_a", node.EditSpec{Path: "/w/a.txt", Edits: []node.Edit{{Old: "world", New: "there"}}})
	must(err)
	if e.Size != 11 {
		t.Fatalf("edit = %+v", e)
	}
	d, err := c.Mkdir(ctx, "sbx_a", node.MkdirSpec{Path: "/w/d"})
	must(err)
	if d.Type != "dir" {
		t.Fatalf("mkdir = %+v", d)
	}
	mv, err := c.MoveFile(ctx, "sbx_a", node.MoveSpec{From: "/w/a.txt", To: "/w/b.txt"})
	must(err)
	if mv.Path != "/w/b.txt" {
		t.Fatalf("move = %+v", mv)
	}
	must(c.RemoveFile(ctx, "sbx_a", "/w/b.txt", false))
	if _, err := c.StatFile(ctx, "sbx_a", "/w/b.txt"); code(err) != api.CodeNotFound {
		t.Fatalf("a removed file: %v", err)
	}
	commit, err := c.CloneGit(ctx, "sbx_a", node.GitSpec{URL: "https://git.test/r", Ref: "main", Token: "tok", Path: "/w/src", IDs: node.IDRange{HostID: 7, Size: 1}})
	must(err)
	if len(commit) != 40 {
		t.Fatalf("commit = %q", commit)
	}
	if sb, _ := n.Sandbox("sbx_a"); string(sb.Files["/w/src/.git-spec"]) != "https://git.test/r main 0 tok" {
		t.Fatalf("git spec = %q", sb.Files["/w/src/.git-spec"])
	}

	n.SetStats("sbx_a", node.Stats{CPUNanos: 42, MemoryBytes: 1 << 20})
	stats := c.Stats(ctx, []string{"sbx_a", "sbx_none"})
	if len(stats) != 1 || stats["sbx_a"].CPUNanos != 42 {
		t.Fatalf("stats = %+v", stats)
	}
	n.SetGPUs(node.GPUs{Type: "t4", Names: []string{"nvidia.com/gpu=0"}})
	if g := c.GPUs(); g.Type != "t4" || len(g.Names) != 1 {
		t.Fatalf("gpus = %+v", g)
	}
	must(c.Publish(ctx, "sbx_a", []int{80, 81}))
	must(c.PublishPort(ctx, "sbx_a", 82))
	must(c.UnpublishPort(ctx, "sbx_a", 80))
	if p := n.Published("sbx_a"); !slices.Equal(p, []int{81, 82}) {
		t.Fatalf("published = %v", p)
	}

	obs := api.NetworkObservation{Destination: "evil.test", Count: 3}
	n.Observe(node.Observation{SandboxID: "sbx_a", NetworkObservation: obs})
	if p := c.PendingObservations("sbx_a"); len(p) != 1 || p[0].Destination != "evil.test" {
		t.Fatalf("pending = %+v", p)
	}
	if d := c.DrainObservations(); len(d) != 1 || d[0].SandboxID != "sbx_a" || d[0].Count != 3 {
		t.Fatalf("drained = %+v", d)
	}
	if d := c.DrainObservations(); len(d) != 0 {
		t.Fatalf("drained twice: %+v", d)
	}

	info, err := c.FinishSleep(ctx, "sbx_a")
	must(err)
	if info.DataBytes == 0 {
		t.Fatalf("save = %+v", info)
	}
	cp, err := c.CopySave(ctx, "sbx_a", "setup_x")
	must(err)
	if cp.DataBytes != info.DataBytes {
		t.Fatalf("copy = %+v, save %+v", cp, info)
	}
	must(c.Wake(ctx, spec("sbx_a")))
	if sb, _ := n.Sandbox("sbx_a"); !sb.Spec.SetID {
		t.Fatalf("a wake's spec lost SetID: %+v", sb.Spec)
	}
	must(c.DropSave(ctx, "setup_x"))
	must(c.Attach(ctx, spec("sbx_a"), nil))
	must(c.DestroyRuntime(ctx, "sbx_a"))
	must(c.Destroy(ctx, "sbx_a"))

	want := []string{"admit sbx_a", "start sbx_a", "clone sbx_a", "publish sbx_a", "publish-port sbx_a", "unpublish-port sbx_a",
		"sleep sbx_a", "copy-save sbx_a", "wake sbx_a", "drop-save setup_x", "attach sbx_a", "destroy-runtime sbx_a", "destroy sbx_a"}
	if got := n.Calls(); !slices.Equal(got, want) {
		t.Fatalf("calls:\n got %v\nwant %v", got, want)
	}
}

// TestErrorCodes: the node's coded errors come back with their code; its
// uncoded ones come back uncoded (internal), as a local node's do.
func TestErrorCodes(t *testing.T) {
	f := newFleet(t)
	ctx := t.Context()
	if err := f.client.Start(ctx, spec("sbx_b")); err != nil {
		t.Fatal(err)
	}
	f.node.SetFile("sbx_b", "/f", []byte("x"))
	f.node.Fail("sleep", fmt.Errorf("disk on fire"))
	f.node.Fail("wake", api.Errorf(api.CodeResourceExhausted, "no room"))
	tests := []struct {
		name string
		call func() error
		want api.Code
	}{
		{"not running", func() error { return f.client.SetHostname(ctx, "sbx_none", "x") }, api.CodeConflict},
		{"no file", func() error { _, err := f.client.StatFile(ctx, "sbx_b", "/nope"); return err }, api.CodeNotFound},
		{"precondition", func() error {
			_, _, err := f.client.WriteFile(ctx, "sbx_b", node.WriteSpec{Path: "/f", IfNoneMatch: true, Mode: -1, Size: -1}, strings.NewReader("y"))
			return err
		}, api.CodePreconditionFailed},
		{"coded", func() error { return f.client.Wake(ctx, spec("sbx_b")) }, api.CodeResourceExhausted},
		{"uncoded", func() error { _, err := f.client.FinishSleep(ctx, "sbx_b"); return err }, api.CodeInternal},
		{"no archive", func() error { _, err := f.client.ReadArchive(ctx, "sbx_b", "/none"); return err }, api.CodeUnprocessable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			if got := code(err); got != tt.want {
				t.Fatalf("code = %q (%v), want %q", got, err, tt.want)
			}
			if tt.want == api.CodeInternal {
				if api.ErrorMessage(err) != "internal error" || !strings.Contains(err.Error(), "disk on fire") {
					t.Fatalf("an uncoded error = %v (user sees %q)", err, api.ErrorMessage(err))
				}
			}
		})
	}
}

// TestOutputFollow: a follow streams chunks as they come from the
// sequence number asked for, ends with the exit, and the Output's state
// (LastSeq, Sizes, Changed, Exit, Ended, Stream) follows the node's.
func TestOutputFollow(t *testing.T) {
	f := newFleet(t)
	ctx := t.Context()
	step := make(chan string)
	f.node.Run = func(ctx context.Context, spec node.ExecSpec, out *nodetest.Output) node.Exit {
		for {
			select {
			case s, ok := <-step:
				if !ok {
					out.Write("stderr", []byte("bye"))
					return node.Exit{ExitCode: 3}
				}
				out.Write("stdout", []byte(s))
			case <-ctx.Done():
				return node.Exit{}
			}
		}
	}
	go f.client.Run(ctx)
	must(t, f.client.Start(ctx, spec("sbx_o")))
	started, err := f.client.Exec(ctx, "sbx_o", node.ExecSpec{ID: "cmd_1", Shell: "x"})
	must(t, err)
	// The node's pid of the command comes back with its start.
	if started.PID != nodetest.FirstPID {
		t.Fatalf("exec answered %+v; want pid %d", started, nodetest.FirstPID)
	}
	out, err := f.client.Output("sbx_o", "cmd_1")
	must(t, err)
	defer out.Close()
	changed := out.Changed()
	send(t, step, "one ")
	recv(t, changed)
	for out.LastSeq() < 1 {
		recv(t, out.Changed())
	}
	send(t, step, "two ")
	for out.LastSeq() < 2 {
		recv(t, out.Changed())
	}
	if o, e := out.Sizes(); o != 8 || e != 0 || out.Ended() || out.Exit() != nil {
		t.Fatalf("sizes %d %d ended %v exit %v", o, e, out.Ended(), out.Exit())
	}

	got := make(chan string, 10)
	followed := make(chan *node.Exit, 1)
	go func() {
		exit, err := out.Read(ctx, 1, true, func(c node.Chunk) error {
			got <- fmt.Sprintf("%d %s %s", c.Seq, c.Stream, c.Data)
			return nil
		})
		if err != nil {
			t.Error(err)
		}
		followed <- exit
	}()
	if g := recv(t, got); g != "2 stdout two " {
		t.Fatalf("after 1, first chunk %q", g)
	}
	send(t, step, "three")
	if g := recv(t, got); g != "3 stdout three" {
		t.Fatalf("followed chunk %q", g)
	}
	close(step)
	if g := recv(t, got); g != "4 stderr bye" {
		t.Fatalf("followed chunk %q", g)
	}
	exit := recv(t, followed)
	if exit == nil || exit.ExitCode != 3 {
		t.Fatalf("exit = %+v", exit)
	}
	f.waitEvents(t, 1)
	for !out.Ended() {
		recv(t, out.Changed())
	}
	if e := out.Exit(); e == nil || e.ExitCode != 3 || out.LastSeq() != 4 {
		t.Fatalf("exit %+v last %d", e, out.LastSeq())
	}
	ra, size, err := out.Stream("stdout")
	must(t, err)
	if size != 13 {
		t.Fatalf("stdout size %d", size)
	}
	b := make([]byte, 5)
	if n, err := ra.ReadAt(b, 4); n != 5 || err != nil || string(b) != "two t" {
		t.Fatalf("ReadAt(4) = %d %v %q", n, err, b)
	}
	if n, err := ra.ReadAt(b, 10); n != 3 || err != io.EOF || string(b[:n]) != "ree" {
		t.Fatalf("ReadAt at the end = %d %v %q", n, err, b[:n])
	}
	all, err := io.ReadAll(io.NewSectionReader(ra, 0, size))
	must(t, err)
	if string(all) != "one two three" {
		t.Fatalf("stdout = %q", all)
	}
	// A read without follow gives what there is and the exit.
	var n int
	exit, err = out.Read(ctx, 0, false, func(node.Chunk) error { n++; return nil })
	if err != nil || n != 4 || exit == nil {
		t.Fatalf("read all: %d chunks, exit %v, err %v", n, exit, err)
	}
}

// recv takes a value from ch, or fails the test after a while.
func recv[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatal("nothing came")
		panic("unreachable")
	}
}

// send gives v to ch, or fails the test after a while.
func send[T any](t *testing.T, ch chan<- T, v T) {
	t.Helper()
	select {
	case ch <- v:
	case <-time.After(10 * time.Second):
		t.Fatal("nobody took it")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestStdin: input streams to the command (the fake echoes it).
func TestStdin(t *testing.T) {
	f := newFleet(t)
	ctx := t.Context()
	f.node.Run = func(ctx context.Context, _ node.ExecSpec, _ *nodetest.Output) node.Exit {
		<-ctx.Done()
		return node.Exit{}
	}
	must(t, f.client.Start(ctx, spec("sbx_i")))
	_, err := f.client.Exec(ctx, "sbx_i", node.ExecSpec{ID: "cmd_i", Stdin: true})
	must(t, err)
	big := bytes.Repeat([]byte("0123456789"), 100_000)
	must(t, f.client.Stdin(ctx, "sbx_i", "cmd_i", bytes.NewReader(big), false))
	must(t, f.client.Stdin(ctx, "sbx_i", "cmd_i", nil, true))
	out, err := f.client.Output("sbx_i", "cmd_i")
	must(t, err)
	defer out.Close()
	var got bytes.Buffer
	if _, err := out.Read(ctx, 0, false, func(c node.Chunk) error { got.Write(c.Data); return nil }); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), big) {
		t.Fatalf("stdin arrived as %d bytes, want %d", got.Len(), len(big))
	}
}

// digestNode is the fake with what a real node's files add: a
// Repr-Digest on downloads, the digest an upload's trailer gave, and the
// extended attributes a write sets, answered on its entry as the agent
// does.
type digestNode struct {
	*nodetest.Node
	mu      sync.Mutex
	trailer string // the digest the last upload's trailer gave
}

func (d *digestNode) WriteFile(ctx context.Context, id string, spec node.WriteSpec, body io.Reader) (api.FileEntry, bool, error) {
	e, created, err := d.Node.WriteFile(ctx, id, spec, body)
	e.Xattrs = spec.Xattrs
	if err == nil && spec.Trailer != nil {
		sum, terr := spec.Trailer()
		if terr != nil {
			return e, created, terr
		}
		d.mu.Lock()
		d.trailer = sum
		d.mu.Unlock()
	}
	return e, created, err
}

func (d *digestNode) ReadFile(ctx context.Context, id string, spec node.ReadSpec) (*node.Content, error) {
	c, err := d.Node.ReadFile(ctx, id, spec)
	if err != nil {
		return nil, err
	}
	b, err := io.ReadAll(c.Body)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(b)
	c.ReprDigest = "sha-256=:" + base64.StdEncoding.EncodeToString(sum[:]) + ":"
	c.Body = io.NopCloser(bytes.NewReader(b))
	return c, nil
}

// TestFiles: uploads and downloads stream whole, with their digest
// (known before, or in a trailer after the body) and their ETag and
// Repr-Digest.
func TestFiles(t *testing.T) {
	var dn *digestNode
	f := newFleetOf(t, newCA(t), func(n *nodetest.Node) nodeapi.Node {
		dn = &digestNode{Node: n}
		return dn
	})
	ctx := t.Context()
	must(t, f.client.Start(ctx, spec("sbx_f")))
	body := make([]byte, 3<<20)
	rand.Read(body)
	sum := sha256.Sum256(body)
	digest := hex.EncodeToString(sum[:])
	entry, created, err := f.client.WriteFile(ctx, "sbx_f", node.WriteSpec{
		Path: "/w/blob", Mode: -1, Size: int64(len(body)),
		Trailer: func() (string, error) { return digest, nil },
	}, bytes.NewReader(body))
	must(t, err)
	if !created || entry.Size != int64(len(body)) {
		t.Fatalf("entry %+v created %v", entry, created)
	}
	c, err := f.client.ReadFile(ctx, "sbx_f", node.ReadSpec{Path: "/w/blob"})
	must(t, err)
	got, err := io.ReadAll(c.Body)
	c.Body.Close()
	must(t, err)
	if !bytes.Equal(got, body) || c.Status != 200 || c.ContentLength != int64(len(body)) || c.ETag != `"`+entry.Version+`"` {
		t.Fatalf("download: %d bytes, status %d, length %d, etag %s (version %s)", len(got), c.Status, c.ContentLength, c.ETag, entry.Version)
	}
	if want := "sha-256=:" + base64.StdEncoding.EncodeToString(sum[:]) + ":"; c.ReprDigest != want {
		t.Fatalf("Repr-Digest %q, want %q", c.ReprDigest, want)
	}
	dn.mu.Lock()
	trailer := dn.trailer
	dn.mu.Unlock()
	if trailer != digest {
		t.Fatalf("the upload's trailer gave %q, want %q", trailer, digest)
	}
	// A conditional upload against the version it read.
	_, created, err = f.client.WriteFile(ctx, "sbx_f", node.WriteSpec{Path: "/w/blob", Mode: -1, Size: 2, IfMatch: []string{entry.Version}}, strings.NewReader("hi"))
	if err != nil || created {
		t.Fatalf("If-Match upload: created %v, %v", created, err)
	}
	// Extended attributes cross to the node and back on the entry.
	x := map[string]string{"user.e2b.author": "mish", "user.tag": "a b"}
	entry, _, err = f.client.WriteFile(ctx, "sbx_f", node.WriteSpec{Path: "/w/meta", Mode: -1, Size: 1, Xattrs: x}, strings.NewReader("m"))
	if err != nil || !maps.Equal(entry.Xattrs, x) {
		t.Fatalf("write with xattrs: %v, %v", entry.Xattrs, err)
	}
}

// TestArchives: an archive goes up and comes back byte-identical.
func TestArchives(t *testing.T) {
	f := newFleet(t)
	ctx := t.Context()
	must(t, f.client.Start(ctx, spec("sbx_t")))
	tarball := make([]byte, 5<<20+17)
	rand.Read(tarball)
	res, err := f.client.WriteArchive(ctx, "sbx_t", node.ArchiveSpec{Path: "/w/up"}, bytes.NewReader(tarball))
	must(t, err)
	if res.Bytes != int64(len(tarball)) || res.Path != "/w/up" {
		t.Fatalf("result %+v", res)
	}
	rc, err := f.client.ReadArchive(ctx, "sbx_t", "/w/up")
	must(t, err)
	defer rc.Close()
	got, err := io.ReadAll(rc)
	must(t, err)
	if !bytes.Equal(got, tarball) {
		t.Fatalf("the archive came back as %d bytes, want %d", len(got), len(tarball))
	}
}

// TestDialPort: a tunnel reaches a real TCP server behind the node both
// ways; an unpublished port is refused with the node's code.
func TestDialPort(t *testing.T) {
	f := newFleet(t)
	ctx := t.Context()
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	f.node.PortAddr = func(string, int) string { return echo.Addr().String() }
	must(t, f.client.Start(ctx, spec("sbx_p")))
	must(t, f.client.PublishPort(ctx, "sbx_p", 8080))
	conn, err := f.client.DialPort(ctx, "sbx_p", 8080)
	must(t, err)
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	msg := bytes.Repeat([]byte("ping through the tunnel "), 20_000)
	go conn.Write(msg)
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(conn, got); err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("echo: %v", err)
	}
	if _, err := f.client.DialPort(ctx, "sbx_p", 9999); code(err) != api.CodeUnavailable {
		t.Fatalf("an unpublished port: %v", err)
	}
	if _, err := f.client.DialPort(ctx, "sbx_none", 8080); code(err) != api.CodeConflict {
		t.Fatalf("a sandbox not running: %v", err)
	}
}

// TestEventsResume: exits and denials arrive in order; after the stream
// is cut, the ones made meanwhile arrive, none lost, none twice.
func TestEventsResume(t *testing.T) {
	f := newFleet(t)
	p := newProxy(t, f.addr)
	c := f.newClient(p.ln.Addr().String())
	defer c.Close()
	ctx := t.Context()
	go c.Run(ctx)
	for i := range 3 {
		f.api.OnExit("sbx_e", fmt.Sprintf("cmd_%d", i), node.Exit{}, false)
	}
	f.waitEvents(t, 3)
	p.cut()
	for i := 3; i < 6; i++ {
		f.api.OnExit("sbx_e", fmt.Sprintf("cmd_%d", i), node.Exit{}, false)
	}
	f.api.Denied("sbx_e", api.NetworkObservation{Destination: "evil.test"}, 2)
	f.api.Injected("sbx_e", netpolicy.InjectEvent{Destination: "api.inject.test", Port: 443, Status: 200})
	f.waitEvents(t, 5)
	p.cut()
	f.api.OnExit("sbx_e", "cmd_6", node.Exit{}, false)
	f.waitEvents(t, 1)
	f.mu.Lock()
	defer f.mu.Unlock()
	want := []string{"sbx_e/cmd_0", "sbx_e/cmd_1", "sbx_e/cmd_2", "sbx_e/cmd_3", "sbx_e/cmd_4", "sbx_e/cmd_5", "sbx_e/cmd_6"}
	if !slices.Equal(f.exits, want) || !slices.Equal(f.denied, []string{"sbx_e evil.test"}) || !slices.Equal(f.injected, []string{"sbx_e api.inject.test 200"}) {
		t.Fatalf("exits %v\ndenied %v\ninjected %v", f.exits, f.denied, f.injected)
	}
	select {
	case <-f.events:
		t.Fatal("an event arrived twice")
	default:
	}
}

// TestEventsAfterRestart: a node that restarted numbers its events from
// one again; the client reads them from its start, not from where the
// old run left off.
func TestEventsAfterRestart(t *testing.T) {
	f := newFleet(t)
	p := newProxy(t, f.addr)
	c := f.newClient(p.ln.Addr().String())
	defer c.Close()
	go c.Run(t.Context())
	for i := range 3 {
		f.api.OnExit("sbx_x", fmt.Sprintf("old_%d", i), node.Exit{}, false)
	}
	f.waitEvents(t, 3)
	again := newFleetOf(t, f.ca, func(n *nodetest.Node) nodeapi.Node { return n })
	again.api.OnExit("sbx_x", "new_0", node.Exit{}, false)
	p.retarget(again.addr)
	p.cut()
	f.waitEvents(t, 1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if want := []string{"sbx_x/old_0", "sbx_x/old_1", "sbx_x/old_2", "sbx_x/new_0"}; !slices.Equal(f.exits, want) {
		t.Fatalf("exits %v", f.exits)
	}
}

// TestNodeGone: once a node dies, calls and open follows fail with
// unavailable within seconds and the Output counts as ended.
func TestNodeGone(t *testing.T) {
	f := newFleet(t)
	ctx := t.Context()
	f.node.Run = func(ctx context.Context, _ node.ExecSpec, _ *nodetest.Output) node.Exit {
		<-ctx.Done()
		return node.Exit{}
	}
	must(t, f.client.Start(ctx, spec("sbx_g")))
	if _, err := f.client.Exec(ctx, "sbx_g", node.ExecSpec{ID: "cmd_g"}); err != nil {
		t.Fatal(err)
	}
	out, err := f.client.Output("sbx_g", "cmd_g")
	must(t, err)
	defer out.Close()
	followed := make(chan error, 1)
	started := make(chan struct{})
	go func() {
		close(started)
		_, err := out.Read(ctx, 0, true, func(node.Chunk) error { return nil })
		followed <- err
	}()
	<-started
	changed := out.Changed()
	f.kill()
	within(t, 5*time.Second, "the follow's end", func() {
		if err := <-followed; code(err) != api.CodeUnavailable {
			t.Errorf("follow ended with %v", err)
		}
	})
	within(t, 5*time.Second, "the output's end", func() {
		<-changed
		for !out.Ended() {
			<-out.Changed()
		}
	})
	within(t, 5*time.Second, "a call", func() {
		if err := f.client.Destroy(ctx, "sbx_g"); code(err) != api.CodeUnavailable {
			t.Errorf("a call to a dead node: %v", err)
		}
	})
	within(t, 5*time.Second, "a dial", func() {
		if _, err := f.client.DialPort(ctx, "sbx_g", 1); code(err) != api.CodeUnavailable {
			t.Errorf("a dial to a dead node: %v", err)
		}
	})
}

// TestNodeSilent: a node whose network stops answering (connections
// open, nothing comes back) ends an open follow with unavailable, by the
// connection's pings.
func TestNodeSilent(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for ping timeouts")
	}
	f := newFleet(t)
	p := newProxy(t, f.addr)
	c := f.newClient(p.ln.Addr().String())
	defer c.Close()
	ctx := t.Context()
	f.node.Run = func(ctx context.Context, _ node.ExecSpec, _ *nodetest.Output) node.Exit {
		<-ctx.Done()
		return node.Exit{}
	}
	must(t, c.Start(ctx, spec("sbx_s")))
	if _, err := c.Exec(ctx, "sbx_s", node.ExecSpec{ID: "cmd_s"}); err != nil {
		t.Fatal(err)
	}
	out, err := c.Output("sbx_s", "cmd_s")
	must(t, err)
	defer out.Close()
	followed := make(chan error, 1)
	go func() {
		_, err := out.Read(ctx, 0, true, func(node.Chunk) error { return nil })
		followed <- err
	}()
	p.blackhole()
	within(t, 10*time.Second, "a call", func() {
		if err := c.Destroy(ctx, "sbx_s"); code(err) != api.CodeUnavailable {
			t.Errorf("a call to a silent node: %v", err)
		}
	})
	within(t, 10*time.Second, "the follow's end", func() {
		if err := <-followed; code(err) != api.CodeUnavailable {
			t.Errorf("follow ended with %v", err)
		}
	})
	within(t, 10*time.Second, "a dial", func() {
		if _, err := c.DialPort(ctx, "sbx_s", 80); code(err) != api.CodeUnavailable {
			t.Errorf("a dial to a silent node: %v", err)
		}
	})
	if slices.Contains(f.node.Calls(), "destroy sbx_s") {
		t.Fatal("the silent node got the call")
	}
}

// failingReader gives n bytes, then fails.
type failingReader struct {
	n   int
	err error
}

func (r *failingReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, r.err
	}
	k := min(len(p), r.n)
	for i := range p[:k] {
		p[i] = 'x'
	}
	r.n -= k
	return k, nil
}

// cutArchives is the fake whose archives break after 1 MiB.
type cutArchives struct{ *nodetest.Node }

func (c cutArchives) ReadArchive(ctx context.Context, id, p string) (io.ReadCloser, error) {
	return io.NopCloser(&failingReader{n: 1 << 20, err: errors.New("disk read error")}), nil
}

// TestCutShort: an upload whose body fails reaches the node as failed
// (nothing lands) and returns the body's own error, not the node's
// absence; a download the node cuts short ends in an error, not EOF.
func TestCutShort(t *testing.T) {
	f := newFleetOf(t, newCA(t), func(n *nodetest.Node) nodeapi.Node { return cutArchives{n} })
	ctx := t.Context()
	must(t, f.client.Start(ctx, spec("sbx_c")))
	gone := errors.New("the uploader went away")
	_, err := f.client.WriteArchive(ctx, "sbx_c", node.ArchiveSpec{Path: "/w/up"}, &failingReader{n: 2 << 20, err: gone})
	if !errors.Is(err, gone) {
		t.Fatalf("a broken upload: %v", err)
	}
	_, _, err = f.client.WriteFile(ctx, "sbx_c", node.WriteSpec{Path: "/w/f", Mode: -1, Size: -1}, &failingReader{n: 100, err: gone})
	if !errors.Is(err, gone) {
		t.Fatalf("a broken file upload: %v", err)
	}
	if sb, _ := f.node.Sandbox("sbx_c"); len(sb.Files) != 0 {
		t.Fatalf("a broken upload landed: %v", slices.Collect(maps.Keys(sb.Files)))
	}
	rc, err := f.client.ReadArchive(ctx, "sbx_c", "/w")
	must(t, err)
	defer rc.Close()
	n, err := io.Copy(io.Discard, rc)
	if err == nil {
		t.Fatalf("a download cut at %d bytes ended cleanly", n)
	}
}

// pidNode answers every exec with pid, whatever the fake node ran.
type pidNode struct {
	*nodetest.Node
	pid int
}

func (p pidNode) Exec(ctx context.Context, id string, spec node.ExecSpec) (node.Started, error) {
	if _, err := p.Node.Exec(ctx, id, spec); err != nil {
		return node.Started{}, err
	}
	return node.Started{PID: p.pid}, nil
}

// TestExecPID: a command's pid comes back from the node; a node that
// knows none (answering nothing, as nodes from before pids did) or
// answers one Linux could not give leaves it 0, and the command started
// all the same.
func TestExecPID(t *testing.T) {
	for _, tc := range []struct{ answered, want int }{
		{4242, 4242}, {node.MaxPID, node.MaxPID}, {0, 0}, {node.MaxPID + 1, 0}, {-3, 0},
	} {
		f := newFleetOf(t, newCA(t), func(n *nodetest.Node) nodeapi.Node { return pidNode{n, tc.answered} })
		if err := f.client.Start(t.Context(), spec("sbx_p")); err != nil {
			t.Fatal(err)
		}
		st, err := f.client.Exec(t.Context(), "sbx_p", node.ExecSpec{ID: "cmd_p"})
		if err != nil || st.PID != tc.want {
			t.Errorf("node answered pid %d: got %+v %v, want pid %d", tc.answered, st, err, tc.want)
		}
		if sb, _ := f.node.Sandbox("sbx_p"); len(sb.Commands) != 1 {
			t.Errorf("node answered pid %d: the node ran %d commands", tc.answered, len(sb.Commands))
		}
	}
}
