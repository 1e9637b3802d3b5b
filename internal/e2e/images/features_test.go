package images

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
	it "github.com/cove-dev/cove/internal/images/imagetest"
	"github.com/cove-dev/cove/internal/node/image"
	cove "github.com/cove-dev/cove/sdk/go"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

const previewDomain = "preview.test"

// TestImportedImageFeatures: in a sandbox of an imported busybox image
// whose user is 1234, not the managed image's 1000, the network fence,
// observations, metrics and previews work as on the managed image, and a
// workload naming the image runs in it as its user with its env.
func TestImportedImageFeatures(t *testing.T) {
	e2etest.RequireRoot(t)
	host := e2etest.StartTestHost(t)
	host.ServeHTTP(t, host.Addr.String()+":80", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello from the test host")
	}))
	dir, err := os.MkdirTemp("/var/tmp", "cove-e2e-images-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o711)
	t.Cleanup(func() { os.RemoveAll(dir) })
	if _, err := image.BuildBusybox(t.Context(), dir, "busybox"); err != nil {
		t.Fatal(err)
	}
	s := server{e2etest.StartServer(t, e2etest.WithArgs("--images-dir", dir, "--warm-pool", "0",
		"--metrics-interval", "1s", "--preview-domain", previewDomain, "--cdi-spec-dirs", t.TempDir(),
		"--dns-static", "allowed.test="+host.Addr.String(), "--dns-static", "other.test="+host.Addr.String())), dir}
	c, _ := s.team(t, "features", api.Admission{ManagedEnvironment: true, CustomImages: true, Preview: true})

	img := it.Image(t, v1.Config{User: "1234", Env: []string{"PATH=/bin", "GREETING=hello from the image"}, WorkingDir: "/srv/app"},
		it.Busybox(t, false, "app:x:1234:1234:app:/home/app:/bin/sh\n", "app:x:1234:\n"),
		it.Layer(t, it.Dir("srv", 0o755), it.Dir("srv/app", 0o777), it.Dir("srv/www", 0o755), it.File("srv/www/index.html", "served from the image\n", 0o644)))
	got := mustImport(t, c, "features-"+e2etest.RunID(), archive(t, img, true), nil)
	if got.Config.UID != 1234 {
		t.Fatalf("image config %+v; want uid 1234", got.Config)
	}
	sb := e2etest.Create(t, c, api.CreateSandboxRequest{Template: got.Name, Network: &api.NetworkPolicy{Allow: []string{"allowed.test:80"}}})
	if out := e2etest.MustOK(t, c, sb.ID, "id -u"); out != "1234\n" {
		t.Fatalf("sandbox runs as %q; want 1234", out)
	}

	// busybox wget without -T: Debian's static busybox 1.35 crashes
	// (SIGSEGV) on -T, inside a sandbox or not.
	t.Run("network fence", func(t *testing.T) {
		if out := e2etest.MustOK(t, c, sb.ID, "busybox wget -q -O- http://allowed.test/", e2etest.WithTimeout(30)); out != "hello from the test host" {
			t.Errorf("allowed destination answered %q", out)
		}
		addr := host.Addr.String()
		for _, cmd := range []string{"busybox wget -q -O- http://" + addr + ":8080/", "busybox wget -q -O- http://other.test/"} {
			res := e2etest.Sh(t, c, sb.ID, cmd, e2etest.WithTimeout(30))
			if e2etest.ExitCode(res) == 0 {
				t.Errorf("%q succeeded: %q", cmd, res.Stdout)
			}
			// As root too: the fence is not the user's.
			res = e2etest.Sh(t, c, sb.ID, cmd, e2etest.WithTimeout(30), e2etest.AsRoot)
			if e2etest.ExitCode(res) == 0 {
				t.Errorf("%q as root succeeded: %q", cmd, res.Stdout)
			}
		}
		waitObservations(t, c, sb.ID, "allowed.test:80 allowed", addr+":8080 denied", "other.test:53 denied")
	})

	t.Run("metrics", func(t *testing.T) {
		deadline := time.Now().Add(time.Minute)
		for {
			m, err := c.Metrics(t.Context(), sb.ID, cove.MetricsQuery{From: sb.CreatedAt.Add(-time.Second), To: time.Now().Add(time.Second), Step: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			ok := false
			for _, smp := range m.Samples {
				if smp.MemoryBytes > 0 {
					ok = true
				}
			}
			if ok {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no sample with memory within a minute: %+v", m.Samples)
			}
			time.Sleep(250 * time.Millisecond)
		}
	})

	t.Run("preview", func(t *testing.T) {
		if _, err := c.Exec(t.Context(), sb.ID, api.CreateCommandRequest{Command: "exec busybox httpd -f -p 8080 -h /srv/www"}); err != nil {
			t.Fatal(err)
		}
		p, err := c.CreatePreview(t.Context(), sb.ID, api.CreatePreviewRequest{Port: 8080})
		if err != nil {
			t.Fatal(err)
		}
		_, apiPort, _ := net.SplitHostPort(strings.TrimPrefix(s.URL, "http://"))
		phost := fmt.Sprintf("8080-%s.%s:%s", sb.ID, previewDomain, apiPort)
		var code int
		var body string
		for i := 0; i < 120; i++ {
			code, body = previewGet(t, s.URL, phost, p.Token)
			if code == http.StatusOK {
				break
			}
			time.Sleep(500 * time.Millisecond)
		}
		if code != http.StatusOK || body != "served from the image\n" {
			t.Fatalf("preview answered %d %q", code, body)
		}
		if code, _ := previewGet(t, s.URL, phost, ""); code == http.StatusOK {
			t.Errorf("private preview answered without its token")
		}
	})

	t.Run("workload", func(t *testing.T) {
		w, err := c.SubmitWorkload(t.Context(), api.CreateWorkloadRequest{Image: got.Name,
			Command: `echo "$(id -u) $GREETING in $(pwd)"`, Resources: &api.WorkloadResourcesRequest{}})
		if err != nil {
			t.Fatal(err)
		}
		done, err := c.WaitWorkload(t.Context(), w.ID, api.WorkloadExited, 5*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if done.State != api.WorkloadExited || done.ExitCode == nil || *done.ExitCode != 0 || done.Template != got.Name {
			t.Fatalf("workload %+v (%s)", done, done.StateReason)
		}
		var out bytes.Buffer
		if err := c.WorkloadOutput(t.Context(), w.ID, 0, false, func(r api.OutputRecord) error {
			if r.Stream == "stdout" {
				out.Write(r.Data)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if want := "1234 hello from the image in /srv/app\n"; out.String() != want {
			t.Errorf("workload printed %q; want %q", out.String(), want)
		}
	})
}

// waitObservations waits until the sandbox's network view holds every
// "destination:port decision" of keys.
func waitObservations(t *testing.T, c *cove.Client, id string, keys ...string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		v, err := c.Network(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		have := map[string]bool{}
		for _, o := range v.Observations {
			have[fmt.Sprintf("%s:%d %s", o.Destination, o.Port, o.Decision)] = o.Count > 0
		}
		missing := []string{}
		for _, k := range keys {
			if !have[k] {
				missing = append(missing, k)
			}
		}
		if len(missing) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("observations lack %v: %+v", missing, v.Observations)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// previewGet GETs / of a preview by Host through the API listener, with
// its token if given.
func previewGet(t *testing.T, url, host, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), "GET", url+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	if token != "" {
		req.Header.Set(api.PreviewTokenHeader, token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
