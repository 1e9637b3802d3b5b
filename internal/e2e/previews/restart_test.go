package previews

import (
	"syscall"
	"testing"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
)

// TestPreviewAfterRestart: a restarted cove serve replaces the fence's
// table, then publishes its previews' ports again before it serves: the
// sandbox kept running and its preview answers, token and all.
func TestPreviewAfterRestart(t *testing.T) {
	s := startServer(t)
	c := previewTeam(t, s, "restart")
	sb := e2etest.Create(t, c, api.CreateSandboxRequest{})
	writeFile(t, c, sb.ID, "/workspace/index.html", "still here\n")
	background(t, c, sb.ID, "cd /workspace && exec python3 -m http.server 8000")
	p, err := c.CreatePreview(t.Context(), sb.ID, api.CreatePreviewRequest{Port: 8000})
	if err != nil {
		t.Fatal(err)
	}
	tok := map[string]string{api.PreviewTokenHeader: p.Token}
	waitServing(t, s, previewHost(s, sb.ID, 8000), "/", tok)

	s.Stop(syscall.SIGTERM)
	s.Start()
	resp, body := request(t, s, "GET", previewHost(s, sb.ID, 8000), "/index.html", tok)
	if resp.StatusCode != 200 || body != "still here\n" {
		t.Errorf("after the restart: %d %q", resp.StatusCode, body)
	}
	if err := dial(sandboxAddr(t, s, sb.ID), 8001); err == nil {
		t.Errorf("an unpublished port opened with the restart")
	}
}
