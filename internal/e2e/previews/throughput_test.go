package previews

import (
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
)

// TestPreviewThroughput downloads 256 MiB from python3 -m http.server in a
// sandbox through a preview (Host-routed, through the API listener) and
// straight from the sandbox's address on the node, in turn, and logs both
// rates and their ratio. It is a measurement, not an assertion: only the
// byte counts are checked.
func TestPreviewThroughput(t *testing.T) {
	if testing.Short() {
		t.Skip("a 256 MiB measurement")
	}
	s := startServer(t)
	c := previewTeam(t, s, "bulk")
	sb := e2etest.Create(t, c, api.CreateSandboxRequest{})
	const size = 256 << 20
	e2etest.MustOK(t, c, sb.ID, fmt.Sprintf("head -c %d /dev/urandom > /workspace/big", size), e2etest.WithTimeout(300))
	background(t, c, sb.ID, "cd /workspace && exec python3 -m http.server 8000")
	if _, err := c.CreatePreview(t.Context(), sb.ID, api.CreatePreviewRequest{Port: 8000, Visibility: "public"}); err != nil {
		t.Fatal(err)
	}
	host := previewHost(s, sb.ID, 8000)
	waitServing(t, s, host, "/", nil)
	direct := fmt.Sprintf("http://%s:8000/big", sandboxAddr(t, s, sb.ID))

	fetch := func(url, host string) float64 {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), "GET", url, nil)
		if host != "" {
			req.Host = host
		}
		start := time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		n, err := io.Copy(io.Discard, resp.Body)
		if err != nil || n != size {
			t.Fatalf("%s: %d bytes, %v; want %d", url, n, err, size)
		}
		return float64(n) / (1 << 20) / time.Since(start).Seconds()
	}
	var viaPreview, viaAddr []float64
	for range 3 {
		viaPreview = append(viaPreview, fetch(s.URL+"/big", host))
		viaAddr = append(viaAddr, fetch(direct, ""))
	}
	best := func(xs []float64) float64 {
		m := 0.0
		for _, x := range xs {
			m = max(m, x)
		}
		return m
	}
	p, d := best(viaPreview), best(viaAddr)
	t.Logf("256 MiB download, best of 3: through the preview %.0f MB/s, from the sandbox's address %.0f MB/s, ratio %.2f (all runs: preview %.0f, direct %.0f MiB/s)",
		p, d, p/d, viaPreview, viaAddr)
}
