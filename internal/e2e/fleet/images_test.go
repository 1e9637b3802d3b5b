package fleet

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
	it "github.com/cove-dev/cove/internal/images/imagetest"
	"github.com/cove-dev/cove/internal/node/image"
	cove "github.com/cove-dev/cove/sdk/go"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// ownImages is a node's images dir of its own, holding the busybox
// template only: what an imported image brings into it is what a fetch
// stored.
func ownImages(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/var/tmp", "cove-e2e-node-images-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o711)
	t.Cleanup(func() { os.RemoveAll(dir) })
	if _, err := image.BuildBusybox(t.Context(), dir, "busybox"); err != nil {
		t.Fatal(err)
	}
	return dir
}

// stored lists an images dir's v2 entries.
func stored(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(dir, "v2"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// importImage imports a busybox image with a file of its own through the
// control plane's API, by the admin team (which sees where its sandboxes
// run), which has every admission.
func importImage(t *testing.T, f *e2etest.Fleet) (*cove.Client, api.Image) {
	t.Helper()
	c := f.Control.Admin
	img := it.Image(t, v1.Config{Env: []string{"PATH=/bin", "FROM_IMAGE=yes"}},
		it.Busybox(t, false, "", ""),
		it.Layer(t, it.Dir("data", 0o755), it.File("data/hello", "from the store\n", 0o644)))
	path := filepath.Join(t.TempDir(), "image.tar")
	it.OCIArchive(t, img, path, nil)
	file, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	got, err := c.ImportImage(t.Context(), "fleet-"+e2etest.RunID(), nil, file)
	if err != nil {
		t.Fatalf("import: %v", err)
	}
	return c, got
}

// fleetWithOwnImages is a fleet of two nodes, node-a and node-b, each
// with an images dir of its own.
func fleetWithOwnImages(t *testing.T) (*e2etest.Fleet, map[string]string) {
	t.Helper()
	f := e2etest.StartFleet(t, e2etest.FleetNodes(0), e2etest.FleetControlArgs("--warm-pool", "0"))
	dirs := map[string]string{}
	for _, name := range []string{"node-a", "node-b"} {
		dirs[name] = ownImages(t)
		f.AddNode(name, dirs[name])
		f.WaitNode(name, "ready")
	}
	f.WaitSelfTest("busybox")
	return f, dirs
}

// TestFleetSelfTest: a template ready in the fleet is self-tested once,
// through the control plane, in a sandbox on a node; busybox lacks what
// the managed environment promises, so it is not qualified, and the
// self-test's sandbox is gone afterwards.
func TestFleetSelfTest(t *testing.T) {
	f := e2etest.StartFleet(t, e2etest.FleetControlArgs("--warm-pool", "0"))
	tmpl := f.WaitSelfTest("busybox")
	if tmpl.Qualified || !slices.Contains(tmpl.SelfTest.Failures, "python3") || len(tmpl.SelfTest.Results) == 0 {
		t.Fatalf("busybox's self-test in the fleet: qualified %v, %+v; want it run and python3 failing", tmpl.Qualified, *tmpl.SelfTest)
	}
	var bash *api.SelfTestResult
	for i, r := range tmpl.SelfTest.Results {
		if r.Tool == "bash" {
			bash = &tmpl.SelfTest.Results[i]
		}
	}
	if bash == nil {
		t.Fatalf("no bash result: %+v", tmpl.SelfTest.Results)
	}
	for _, n := range f.ListNodes() {
		if n.Sandboxes != 0 {
			t.Errorf("node %s holds %d sandboxes after the self-test", n.Name, n.Sandboxes)
		}
	}
}

// TestImportedImageOnEveryNode: an image imported through the control
// plane runs on each node, which had none of it: the node brings it from
// the shared store when a sandbox of it starts (node-a) or wakes there
// (node-b), and stores it in its images dir; a new sandbox of it runs on
// node-b too.
func TestImportedImageOnEveryNode(t *testing.T) {
	f, dirs := fleetWithOwnImages(t)
	c, img := importImage(t, f)
	ctx := context.Background()
	want := image.DirName(img.Digest)
	for name, dir := range dirs {
		if slices.Contains(stored(t, dir), want) {
			t.Fatalf("node %s holds the image before any sandbox of it", name)
		}
	}
	only := func(on, other string) {
		t.Helper()
		admin(t, f, "POST", "/v1/nodes/"+on+"/undrain")
		f.WaitNode(on, "ready")
		admin(t, f, "POST", "/v1/nodes/"+other+"/drain")
		f.WaitNode(other, "draining")
	}
	check := func(id, on string) {
		t.Helper()
		if got := nodeOf(t, f, id); got != on {
			t.Fatalf("sandbox of the image on %q; want %s", got, on)
		}
		if out := e2etest.MustOK(t, c, id, "cat /data/hello; echo $FROM_IMAGE"); out != "from the store\nyes\n" {
			t.Fatalf("on %s the image's command printed %q", on, out)
		}
		if !slices.Contains(stored(t, dirs[on]), want) {
			t.Fatalf("node %s ran the image but its images dir holds %v", on, stored(t, dirs[on]))
		}
	}

	// Started on node-a.
	only("node-a", "node-b")
	sb := e2etest.Create(t, c, api.CreateSandboxRequest{Template: img.Name})
	check(sb.ID, "node-a")
	if slices.Contains(stored(t, dirs["node-b"]), want) {
		t.Fatal("node-b holds the image, which it never ran")
	}

	// Woken on node-b.
	if _, err := c.SleepSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	wait(t, c, sb.ID, api.StateAsleep)
	only("node-b", "node-a")
	if _, err := c.WakeSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	wait(t, c, sb.ID, api.StateRunning)
	check(sb.ID, "node-b")

	// Created on node-b.
	sb2 := e2etest.Create(t, c, api.CreateSandboxRequest{Template: img.Name})
	check(sb2.ID, "node-b")
}

// TestTamperedImageBlob: a blob of an imported image changed in the
// bucket refuses a start on a node without the image, saying so, and
// nothing of the image is left in that node's images dir.
func TestTamperedImageBlob(t *testing.T) {
	f, dirs := fleetWithOwnImages(t)
	c, img := importImage(t, f)
	before := stored(t, dirs["node-b"])

	// The image's last layer, rewritten in the bucket with one bit flipped.
	s3c := f.S3.Client()
	prefix := "saves-" + e2etest.RunID() + "/images/"
	get := func(digest string) []byte {
		key := prefix + strings.Replace(digest, ":", "-", 1) + ".tar"
		out, err := s3c.GetObject(t.Context(), &s3.GetObjectInput{Bucket: &f.S3.Bucket, Key: &key})
		if err != nil {
			t.Fatalf("get %s: %v", key, err)
		}
		defer out.Body.Close()
		b, err := io.ReadAll(out.Body)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	m, err := v1.ParseManifest(bytes.NewReader(get(img.Digest)))
	if err != nil {
		t.Fatal(err)
	}
	layer := m.Layers[len(m.Layers)-1].Digest.String()
	b := get(layer)
	b[len(b)/2] ^= 1
	key := prefix + strings.Replace(layer, ":", "-", 1) + ".tar"
	if _, err := s3c.PutObject(t.Context(), &s3.PutObjectInput{Bucket: &f.S3.Bucket, Key: &key, Body: bytes.NewReader(b)}); err != nil {
		t.Fatal(err)
	}

	admin(t, f, "POST", "/v1/nodes/node-a/drain")
	f.WaitNode("node-a", "draining")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Template: img.Name}, true)
	if err == nil && sb.State == api.StateRunning {
		t.Fatalf("a sandbox of a tampered image started on %s", nodeOf(t, f, sb.ID))
	}
	says := ""
	if err != nil {
		says = err.Error()
	}
	if sb.ID != "" {
		got, gerr := c.GetSandbox(ctx, sb.ID)
		if gerr == nil {
			says += " " + got.StateReason
		}
	}
	t.Logf("the refusal: %s", says)
	if !strings.Contains(says, "corrupt") || !strings.Contains(says, "shared store") {
		t.Fatalf("start of a tampered image: %q; want it to say the blob is corrupt and came from the shared store", says)
	}
	if got := stored(t, dirs["node-b"]); !slices.Equal(got, before) {
		t.Fatalf("node-b's images dir holds %v after the refusal; want %v", got, before)
	}
}
