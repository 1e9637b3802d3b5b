package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cove-dev/cove/api"
	cove "github.com/cove-dev/cove/sdk/go"
)

// BenchResult is what `cove bench --json` prints: medians over repeated
// runs in one invocation, each next to its baseline. A nil field was not
// measured (the reason is in Notes).
type BenchResult struct {
	CreateToFirstExecMs     *float64 `json:"create_to_first_exec_ms"`
	CreateToFirstExecWarmMs *float64 `json:"create_to_first_exec_warm_ms"`
	RuncRunMs               *float64 `json:"runc_run_ms"`
	ExecRTTMs               *float64 `json:"exec_rtt_ms"`
	LocalExecMs             *float64 `json:"local_exec_ms"`
	CommandsPerS            *float64 `json:"commands_per_s"`
	LocalCommandsPerS       *float64 `json:"local_commands_per_s"`
	ExecRTTP50MsLoaded      *float64 `json:"exec_rtt_p50_ms_loaded"`
	ExecRTTP99MsLoaded      *float64 `json:"exec_rtt_p99_ms_loaded"`
	ServerCPUMsPerCommand   *float64 `json:"server_cpu_ms_per_command"`
	OutputMBs               *float64 `json:"output_mb_s"`
	PipeMBs                 *float64 `json:"pipe_mb_s"`
	SandboxPipeMBs          *float64 `json:"sandbox_pipe_mb_s"`
	UploadMBs               *float64 `json:"upload_mb_s"`
	DownloadMBs             *float64 `json:"download_mb_s"`
	CpMBs                   *float64 `json:"cp_mb_s"`
	Sleep100MiBs            *float64 `json:"sleep_100mib_s"`
	Wake100MiBs             *float64 `json:"wake_100mib_s"`
	TarZstd100MiBs          *float64 `json:"tar_zstd_100mib_s"`
	UntarZstd100MiBs        *float64 `json:"untar_zstd_100mib_s"`
	IdleTarget              *int     `json:"idle_target"`
	IdleSandboxesMax        *int     `json:"idle_sandboxes_max"`
	IdleSandboxMiB          *float64 `json:"idle_sandbox_mib"`
	IdleHostMiB             *float64 `json:"idle_host_mib"`
	IdleKernelMiB           *float64 `json:"idle_kernel_mib"`
	IdleServerMiB           *float64 `json:"idle_server_mib"`
	IdleServerFDs           *float64 `json:"idle_server_fds"`
	IdleHostTasks           *float64 `json:"idle_host_tasks"`
	IdleCreateS             *float64 `json:"idle_create_s"`
	IdleTerminateS          *float64 `json:"idle_terminate_s"`
	IdleStoppedBy           string   `json:"idle_stopped_by,omitempty"`
	IdleLeaks               []string `json:"idle_leaks"`
	ServerRSSMiB            *float64 `json:"server_rss_mib"`
	Runs                    int      `json:"runs"`
	Notes                   []string `json:"notes,omitempty"`
}

type benchOpts struct {
	runs      int
	bytes     int64
	idle      idleOpts
	imagesDir string
	template  string
	runc      string
	clients   int
	loadFor   time.Duration
}

func (a *app) benchCmd() *cobra.Command {
	var o benchOpts
	c := &cobra.Command{
		Use:   "bench",
		Short: "Measure a running server against its baselines (runc, local exec, pipes, cp)",
		Long: `Measure a running cove server: create to first command, command round trip,
commands per second from concurrent clients and the round trip under that
load, output, upload and download throughput, sleep and wake of 100 MiB, how many
idle sandboxes it holds and what each costs, and its memory. Each figure is a
median over --runs, with its baseline measured in the same run on this host.
Run it on the server's host (as root for the bare runc baseline).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			res, err := runBench(cmd.Context(), cl, o, a.env.Stderr)
			if err != nil {
				return err
			}
			if a.json {
				return a.printJSON(res)
			}
			printBench(a.env.Stdout, res)
			return nil
		},
	}
	f := c.Flags()
	f.IntVar(&o.runs, "runs", 5, "repetitions of each measurement")
	f.Int64Var(&o.bytes, "bytes", 256<<20, "bytes streamed, uploaded and downloaded")
	f.IntVar(&o.idle.target, "idle-target", 500, "idle sandboxes to try to hold at once (0 skips the density measure)")
	f.IntVar(&o.idle.parallel, "idle-parallel", 4, "idle sandboxes created at once")
	f.Int64Var(&o.idle.memoryMiB, "idle-memory-mib", 128, "memory limit of each idle sandbox")
	f.Int64Var(&o.idle.diskMiB, "idle-disk-mib", 64, "disk of each idle sandbox")
	f.StringVar(&o.imagesDir, "images-dir", "/var/lib/cove/images", "the server's images, for the bare runc baseline")
	f.StringVar(&o.template, "template", "", "template to measure (default: the server's)")
	f.StringVar(&o.runc, "runc", "runc", "runc binary for the baseline")
	f.IntVar(&o.clients, "clients", 50, "concurrent clients of the commands-per-second measure")
	f.DurationVar(&o.loadFor, "load-for", 5*time.Second, "how long the commands-per-second measure (and its local baseline) runs")
	a.jsonFlag(c)
	return c
}

func ptr[T any](v T) *T { return &v }

func medianMs(ds []time.Duration) *float64 {
	if len(ds) == 0 {
		return nil
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ptr(float64(ds[len(ds)/2].Microseconds()) / 1000)
}

func mbs(n int64, d time.Duration) float64 { return float64(n) / d.Seconds() / 1e6 }

func medianF(v []float64) *float64 {
	if len(v) == 0 {
		return nil
	}
	sort.Float64s(v)
	return ptr(v[len(v)/2])
}

func runBench(ctx context.Context, cl *cove.Client, o benchOpts, progress io.Writer) (*BenchResult, error) {
	res := &BenchResult{Runs: o.runs}
	step := func(s string) { fmt.Fprintf(progress, "bench: %s\n", s) }
	var made []string
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		for _, id := range made {
			cl.TerminateSandbox(cctx, id)
		}
	}()
	newSandbox := func(req api.CreateSandboxRequest) (api.Sandbox, error) {
		req.Template = o.template
		req.Labels = map[string]string{"cove-bench": "1"}
		sb, err := cl.CreateSandbox(ctx, req, true)
		if err == nil {
			made = append(made, sb.ID)
			if sb.State != api.StateRunning {
				err = fmt.Errorf("sandbox %s is %s: %s", sb.ID, sb.State, sb.StateReason)
			}
		}
		return sb, err
	}
	trueCmd := api.CreateCommandRequest{Argv: []string{"true"}}

	step("create to first command, cold and from the warm pool")
	// A create with its own workdir never fits the warm pool: it is cold.
	firstExec := func(req api.CreateSandboxRequest) (time.Duration, api.Sandbox, error) {
		start := time.Now()
		sb, err := newSandbox(req)
		if err != nil {
			return 0, sb, err
		}
		if _, err := cl.ExecWait(ctx, sb.ID, trueCmd); err != nil {
			return 0, sb, err
		}
		d := time.Since(start)
		cl.TerminateSandbox(ctx, sb.ID)
		return d, sb, nil
	}
	var cold, warm []time.Duration
	var template string
	for range o.runs {
		d, sb, err := firstExec(api.CreateSandboxRequest{Workdir: "/home/user"})
		if err != nil {
			return nil, err
		}
		cold = append(cold, d)
		template = sb.Template
	}
	res.CreateToFirstExecMs = medianMs(cold)
	for range o.runs {
		if !waitWarm(ctx, cl) {
			res.Notes = append(res.Notes, "create_to_first_exec_warm_ms: the server keeps no warm pool (cove serve --warm-pool)")
			warm = nil
			break
		}
		d, _, err := firstExec(api.CreateSandboxRequest{})
		if err != nil {
			return nil, err
		}
		warm = append(warm, d)
	}
	res.CreateToFirstExecWarmMs = medianMs(warm)

	step("bare runc run of the same image")
	if d, err := runcBaseline(ctx, o, template); err != nil {
		res.Notes = append(res.Notes, "runc_run_ms: "+err.Error())
	} else {
		res.RuncRunMs = medianMs(d)
	}

	sb, err := newSandbox(api.CreateSandboxRequest{})
	if err != nil {
		return nil, err
	}
	step("command round trip and local exec")
	// The create above took the warm pool's sandbox: its refill (a cold
	// start on the same cores) is let finish first, so that the round
	// trip is measured alone, as in a sandbox that has been running.
	waitWarm(ctx, cl)
	var rtt, local []time.Duration
	for range max(o.runs, 20) {
		start := time.Now()
		if _, err := cl.ExecWait(ctx, sb.ID, trueCmd); err != nil {
			return nil, err
		}
		rtt = append(rtt, time.Since(start))
		start = time.Now()
		if err := exec.Command("true").Run(); err != nil {
			return nil, err
		}
		local = append(local, time.Since(start))
	}
	res.ExecRTTMs, res.LocalExecMs = medianMs(rtt), medianMs(local)

	step(fmt.Sprintf("%d clients of commands for %s, and local fork+exec", o.clients, o.loadFor))
	loaded := []string{sb.ID}
	for len(loaded) < loadSandboxes() {
		more, err := newSandbox(api.CreateSandboxRequest{})
		if err != nil {
			return nil, err
		}
		loaded = append(loaded, more.ID)
	}
	if err := benchLoad(ctx, cl, loaded, o, res); err != nil {
		return nil, err
	}
	for _, id := range loaded[1:] {
		cl.TerminateSandbox(ctx, id)
	}

	step(fmt.Sprintf("output of %d MiB and a host pipe", o.bytes>>20))
	var out, pipe, sandboxPipe []float64
	for range o.runs {
		start := time.Now()
		c, err := cl.Exec(ctx, sb.ID, api.CreateCommandRequest{Argv: []string{"head", "-c", strconv.FormatInt(o.bytes, 10), "/dev/zero"}})
		if err != nil {
			return nil, err
		}
		var n int64
		if err := cl.Output(ctx, sb.ID, c.ID, 0, true, func(r api.OutputRecord) error { n += int64(len(r.Data)); return nil }); err != nil {
			return nil, err
		}
		out = append(out, mbs(n, time.Since(start)))
		start = time.Now()
		if err := exec.Command("sh", "-c", fmt.Sprintf("head -c %d /dev/zero | cat >/dev/null", o.bytes)).Run(); err != nil {
			return nil, err
		}
		pipe = append(pipe, mbs(o.bytes, time.Since(start)))
		// The same pipe inside the sandbox, under its CPU quota; the time
		// includes one command round trip, milliseconds against seconds.
		start = time.Now()
		r, err := cl.ExecWait(ctx, sb.ID, api.CreateCommandRequest{Command: fmt.Sprintf("head -c %d /dev/zero | cat >/dev/null", o.bytes)})
		if err != nil {
			return nil, err
		}
		if r.Command.ExitCode == nil || *r.Command.ExitCode != 0 {
			return nil, fmt.Errorf("pipe in the sandbox failed: %s", r.Stderr)
		}
		sandboxPipe = append(sandboxPipe, mbs(o.bytes, time.Since(start)))
	}
	res.OutputMBs, res.PipeMBs, res.SandboxPipeMBs = medianF(out), medianF(pipe), medianF(sandboxPipe)

	step(fmt.Sprintf("upload, download and cp of %d MiB", o.bytes>>20))
	if err := benchFiles(ctx, cl, sb.ID, o, res); err != nil {
		return nil, err
	}

	step("sleep and wake with 100 MiB of random files, and tar | zstd of the same on this host")
	// The sandbox holds the 100 MiB alone: the upload's file goes first.
	if err := cl.RemoveFile(ctx, sb.ID, "/tmp/bench-file"); err != nil {
		return nil, err
	}
	if r, err := cl.ExecWait(ctx, sb.ID, api.CreateCommandRequest{Command: randomFilesScript(sb.Workdir + "/bench-random")}); err != nil {
		return nil, err
	} else if r.Command.ExitCode == nil || *r.Command.ExitCode != 0 {
		return nil, fmt.Errorf("writing 100 MiB of random files: %s", r.Stderr)
	}
	var sleeps, wakes []float64
	for range min(o.runs, 3) {
		start := time.Now()
		if _, err := cl.SleepSandbox(ctx, sb.ID); err != nil {
			return nil, err
		}
		if got, err := cl.WaitSandbox(ctx, sb.ID, api.StateAsleep, 10*time.Minute); err != nil || got.State != api.StateAsleep {
			return nil, fmt.Errorf("sleep: %s %v", got.State, err)
		}
		sleeps = append(sleeps, time.Since(start).Seconds())
		start = time.Now()
		if _, err := cl.WakeSandbox(ctx, sb.ID); err != nil {
			return nil, err
		}
		if got, err := cl.WaitSandbox(ctx, sb.ID, api.StateRunning, 10*time.Minute); err != nil || got.State != api.StateRunning {
			return nil, fmt.Errorf("wake: %s %v", got.State, err)
		}
		wakes = append(wakes, time.Since(start).Seconds())
	}
	res.Sleep100MiBs, res.Wake100MiBs = medianF(sleeps), medianF(wakes)
	if tarS, untarS, err := tarZstdBaseline(ctx, min(o.runs, 3)); err != nil {
		res.Notes = append(res.Notes, "tar_zstd_100mib_s: "+err.Error())
	} else {
		res.TarZstd100MiBs, res.UntarZstd100MiBs = medianF(tarS), medianF(untarS)
	}

	if o.idle.target > 0 {
		benchIdle(ctx, cl, o, res, step)
	}
	if res.ServerRSSMiB == nil {
		if rss, err := serverRSS(cl.BaseURL()); err != nil {
			res.Notes = append(res.Notes, "server_rss_mib: "+err.Error())
		} else {
			res.ServerRSSMiB = ptr(float64(rss) / (1 << 20))
		}
	}
	return res, nil
}

// benchFiles uploads and downloads o.bytes through the files API and
// copies as many bytes with cp on this host.
func benchFiles(ctx context.Context, cl *cove.Client, ref string, o benchOpts, res *BenchResult) error {
	dir, err := os.MkdirTemp("", "cove-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	src := filepath.Join(dir, "src")
	if err := exec.Command("sh", "-c", fmt.Sprintf("head -c %d /dev/urandom > %s", o.bytes, src)).Run(); err != nil {
		return err
	}
	var up, down, cp []float64
	for range min(o.runs, 3) {
		f, err := os.Open(src)
		if err != nil {
			return err
		}
		start := time.Now()
		_, err = cl.WriteFile(ctx, ref, "/tmp/bench-file", bufio.NewReaderSize(f, 1<<20))
		f.Close()
		if err != nil {
			return err
		}
		up = append(up, mbs(o.bytes, time.Since(start)))
		start = time.Now()
		if _, err := cl.DownloadFile(ctx, ref, "/tmp/bench-file", io.Discard); err != nil {
			return err
		}
		down = append(down, mbs(o.bytes, time.Since(start)))
		dst := filepath.Join(dir, "dst")
		os.Remove(dst)
		start = time.Now()
		if err := exec.Command("cp", src, dst).Run(); err != nil {
			return err
		}
		cp = append(cp, mbs(o.bytes, time.Since(start)))
	}
	res.UploadMBs, res.DownloadMBs, res.CpMBs = medianF(up), medianF(down), medianF(cp)
	return nil
}

// runcBaseline times `runc run /bin/true` in a plain bundle over the
// template's image rootfs (no overlay, no user namespace, no agent).
func runcBaseline(ctx context.Context, o benchOpts, template string) ([]time.Duration, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("needs root on the server's host")
	}
	// Images of the current format (their own IDs) live under v2/.
	rootfs := filepath.Join(o.imagesDir, "v2", template, "rootfs")
	if _, err := os.Stat(rootfs); err != nil {
		return nil, fmt.Errorf("image of %q not found under %s (--images-dir)", template, o.imagesDir)
	}
	dir, err := os.MkdirTemp("", "cove-bench-runc-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if out, err := exec.CommandContext(ctx, o.runc, "spec", "--bundle", dir).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("runc spec: %v %s", err, out)
	}
	p := filepath.Join(dir, "config.json")
	raw, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	var spec map[string]any
	if err := json.Unmarshal(raw, &spec); err != nil {
		return nil, err
	}
	spec["root"] = map[string]any{"path": rootfs, "readonly": true}
	proc := spec["process"].(map[string]any)
	proc["terminal"] = false
	proc["args"] = []string{"/bin/true"}
	raw, _ = json.Marshal(spec)
	if err := os.WriteFile(p, raw, 0o644); err != nil {
		return nil, err
	}
	var ds []time.Duration
	for i := range max(o.runs, 5) {
		start := time.Now()
		id := fmt.Sprintf("cove-bench-%d-%d", os.Getpid(), i)
		if out, err := exec.CommandContext(ctx, o.runc, "--root", filepath.Join(dir, "state"), "run", "--bundle", dir, id).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("runc run: %v %s", err, bytes.TrimSpace(out))
		}
		ds = append(ds, time.Since(start))
	}
	return ds, nil
}

// cgroupMemoryMiB is the mean memory charged to the sandboxes' cgroups
// (cgroup v1 memory hierarchy, under any parent) on this host.
func cgroupMemoryMiB(ids []string) (float64, error) {
	if len(ids) == 0 {
		return 0, fmt.Errorf("no idle sandbox")
	}
	var total int64
	for _, id := range ids {
		paths, _ := filepath.Glob("/sys/fs/cgroup/memory/*/" + id + "/memory.usage_in_bytes")
		if len(paths) != 1 {
			return 0, fmt.Errorf("memory cgroup of %s not found on this host", id)
		}
		b, err := os.ReadFile(paths[0])
		if err != nil {
			return 0, err
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			return 0, err
		}
		total += n
	}
	return float64(total) / float64(len(ids)) / (1 << 20), nil
}

// serverRSS returns the resident memory of the process listening on the
// server URL's port on this host.
func serverRSS(serverURL string) (int64, error) {
	pid, err := serverPID(serverURL)
	if err != nil {
		return 0, err
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("no VmRSS for pid %d", pid)
}

// serverPID finds the process on this host that serves serverURL.
func serverPID(serverURL string) (int, error) {
	u, err := url.Parse(serverURL)
	if err != nil {
		return 0, err
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		return 0, fmt.Errorf("server URL %s names no port", serverURL)
	}
	return listenerPID(port)
}

// listenerPID finds the process holding the TCP socket that listens on port.
func listenerPID(port int) (int, error) {
	inodes := map[string]bool{}
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(table)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			// local_address is HEX_IP:HEX_PORT; state 0A is LISTEN.
			if len(f) > 9 && f[3] == "0A" && strings.HasSuffix(f[1], fmt.Sprintf(":%04X", port)) {
				inodes["socket:["+f[9]+"]"] = true
			}
		}
	}
	if len(inodes) == 0 {
		return 0, fmt.Errorf("no process on this host listens on port %d (run cove bench on the server's host)", port)
	}
	fds, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, fd := range fds {
		if target, err := os.Readlink(fd); err == nil && inodes[target] {
			return strconv.Atoi(strings.Split(fd, "/")[2])
		}
	}
	return 0, fmt.Errorf("the listener on port %d belongs to no visible process", port)
}

func printBench(w io.Writer, r *BenchResult) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	f := func(v *float64, unit string) string {
		if v == nil {
			return "-"
		}
		return fmt.Sprintf("%.1f %s", *v, unit)
	}
	ratio := func(a, b *float64) string {
		if a == nil || b == nil || *b == 0 {
			return ""
		}
		return fmt.Sprintf("%.2f×", *a / *b)
	}
	fmt.Fprintln(tw, "MEASURE\tCOVE\tBASELINE\tRATIO")
	fmt.Fprintf(tw, "create → first command\t%s\trunc run: %s\t%s\n", f(r.CreateToFirstExecMs, "ms"), f(r.RuncRunMs, "ms"), ratio(r.CreateToFirstExecMs, r.RuncRunMs))
	fmt.Fprintf(tw, "create → first command, warm pool\t%s\trunc run: %s\t%s\n", f(r.CreateToFirstExecWarmMs, "ms"), f(r.RuncRunMs, "ms"), ratio(r.CreateToFirstExecWarmMs, r.RuncRunMs))
	fmt.Fprintf(tw, "command round trip\t%s\tlocal exec: %s\t%s\n", f(r.ExecRTTMs, "ms"), f(r.LocalExecMs, "ms"), ratio(r.ExecRTTMs, r.LocalExecMs))
	fmt.Fprintf(tw, "commands per second, loaded\t%s\tlocal fork+exec: %s\t%s\n", f(r.CommandsPerS, "/s"), f(r.LocalCommandsPerS, "/s"), ratio(r.CommandsPerS, r.LocalCommandsPerS))
	fmt.Fprintf(tw, "command round trip, loaded\tp50 %s, p99 %s\t\t\n", f(r.ExecRTTP50MsLoaded, "ms"), f(r.ExecRTTP99MsLoaded, "ms"))
	fmt.Fprintf(tw, "server CPU per command, loaded\t%s\t\t\n", f(r.ServerCPUMsPerCommand, "ms"))
	fmt.Fprintf(tw, "output\t%s\tpipe: %s\t%s\n", f(r.OutputMBs, "MB/s"), f(r.PipeMBs, "MB/s"), ratio(r.OutputMBs, r.PipeMBs))
	fmt.Fprintf(tw, "output\t%s\tpipe in the sandbox: %s\t%s\n", f(r.OutputMBs, "MB/s"), f(r.SandboxPipeMBs, "MB/s"), ratio(r.OutputMBs, r.SandboxPipeMBs))
	fmt.Fprintf(tw, "upload\t%s\tcp: %s\t%s\n", f(r.UploadMBs, "MB/s"), f(r.CpMBs, "MB/s"), ratio(r.UploadMBs, r.CpMBs))
	fmt.Fprintf(tw, "download\t%s\tcp: %s\t%s\n", f(r.DownloadMBs, "MB/s"), f(r.CpMBs, "MB/s"), ratio(r.DownloadMBs, r.CpMBs))
	fmt.Fprintf(tw, "sleep, 100 MiB\t%s\ttar | zstd: %s\t%s\n", f(r.Sleep100MiBs, "s"), f(r.TarZstd100MiBs, "s"), ratio(r.Sleep100MiBs, r.TarZstd100MiBs))
	fmt.Fprintf(tw, "wake, 100 MiB\t%s\tzstd -d | tar: %s\t%s\n", f(r.Wake100MiBs, "s"), f(r.UntarZstd100MiBs, "s"), ratio(r.Wake100MiBs, r.UntarZstd100MiBs))
	if r.IdleSandboxesMax != nil {
		fmt.Fprintf(tw, "idle sandboxes held\t%d of %d\t\t\n", *r.IdleSandboxesMax, *r.IdleTarget)
		fmt.Fprintf(tw, "memory per idle sandbox\thost %s: cgroup %s, kernel objects %s, server %s\t\t\n",
			f(r.IdleHostMiB, "MiB"), f(r.IdleSandboxMiB, "MiB"), f(r.IdleKernelMiB, "MiB"), f(r.IdleServerMiB, "MiB"))
		fmt.Fprintf(tw, "server descriptors per idle sandbox\t%s\t\t\n", f(r.IdleServerFDs, ""))
		fmt.Fprintf(tw, "host threads (process IDs) per idle sandbox\t%s\t\t\n", f(r.IdleHostTasks, ""))
		fmt.Fprintf(tw, "create them, terminate them\t%s, %s\t\t\n", f(r.IdleCreateS, "s"), f(r.IdleTerminateS, "s"))
		leaks := "none"
		if len(r.IdleLeaks) > 0 {
			leaks = strings.Join(r.IdleLeaks, "; ")
		}
		fmt.Fprintf(tw, "left after terminating them\t%s\t\t\n", leaks)
	}
	fmt.Fprintf(tw, "server memory\t%s\t\t\n", f(r.ServerRSSMiB, "MiB"))
	tw.Flush()
	for _, n := range r.Notes {
		fmt.Fprintln(w, "note: "+n)
	}
}

// waitWarm waits until the server's warm pool has a sandbox ready; false
// when it keeps none or does not fill within a while.
func waitWarm(ctx context.Context, cl *cove.Client) bool {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		h, err := cl.Health(ctx)
		if err != nil || h.WarmPool.Target == 0 {
			return false
		}
		if h.WarmPool.Ready > 0 {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}
