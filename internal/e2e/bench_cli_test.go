package e2e

import (
	"encoding/json"
	"testing"

	"github.com/cove-dev/cove/internal/e2e/e2etest"
)

// TestBenchCommand runs `cove bench --json` small against a server with a
// warm pool and checks that it reports every field.
func TestBenchCommand(t *testing.T) {
	s := e2etest.StartServer(t)
	out, errs, code := cli(t, s, "", "bench", "--json", "--runs", "1", "--bytes", "8388608", "--idle-target", "3",
		"--clients", "4", "--load-for", "500ms", "--images-dir", e2etest.ImagesDir())
	if code != 0 {
		t.Fatalf("cove bench: %d\n%s", code, errs)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	for _, field := range []string{
		"create_to_first_exec_ms", "create_to_first_exec_warm_ms", "runc_run_ms", "exec_rtt_ms", "local_exec_ms",
		"output_mb_s", "pipe_mb_s", "upload_mb_s", "download_mb_s", "cp_mb_s",
		"commands_per_s", "local_commands_per_s", "exec_rtt_p50_ms_loaded", "exec_rtt_p99_ms_loaded", "sandbox_pipe_mb_s",
		"sleep_100mib_s", "wake_100mib_s", "tar_zstd_100mib_s", "untar_zstd_100mib_s", "idle_target", "idle_sandboxes_max", "idle_sandbox_mib", "server_rss_mib",
		"idle_create_s", "idle_terminate_s",
	} {
		v, ok := got[field]
		if !ok || v == nil {
			t.Errorf("%s is missing or null (notes: %v)", field, got["notes"])
			continue
		}
		if n, ok := v.(float64); !ok || n <= 0 {
			t.Errorf("%s = %v, want a positive number", field, v)
		}
	}
	// The host's free memory moves with whatever else runs here, three
	// sandboxes may open no descriptor of their own in the server, and a
	// short load may take less than a clock tick of the server's CPU per
	// command, and other work starts and ends threads on the host: only
	// their presence is checked.
	for _, field := range []string{"idle_host_mib", "idle_server_fds", "idle_host_tasks", "server_cpu_ms_per_command"} {
		if _, ok := got[field].(float64); !ok {
			t.Errorf("%s = %v, want a number", field, got[field])
		}
	}
	if leaks, ok := got["idle_leaks"].([]any); !ok || len(leaks) != 0 {
		t.Errorf("idle_leaks = %v, want an empty list", got["idle_leaks"])
	}
	if got["idle_sandboxes_max"] != float64(3) {
		t.Errorf("idle_sandboxes_max = %v, want 3", got["idle_sandboxes_max"])
	}
}
