package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cove-dev/cove/api"
	cove "github.com/cove-dev/cove/sdk/go"
)

// benchLoad runs o.clients clients for o.loadFor, each looping over a
// waited `true` in one of sandboxes (client i in sandbox i mod n), then as
// many goroutines looping over a local fork+exec of `true` for as long on
// this host. It fills commands_per_s, local_commands_per_s and the loaded
// round trip's p50 and p99.
func benchLoad(ctx context.Context, cl *cove.Client, sandboxes []string, o benchOpts, res *BenchResult) error {
	trueCmd := api.CreateCommandRequest{Argv: []string{"true"}}
	var (
		mu   sync.Mutex
		rtts []time.Duration
		errs []error
	)
	run := func(one func(i int) error) int {
		deadline := time.Now().Add(o.loadFor)
		var wg sync.WaitGroup
		var done int
		for i := range o.clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				n := 0
				for time.Now().Before(deadline) && ctx.Err() == nil {
					if err := one(i); err != nil {
						mu.Lock()
						errs = append(errs, err)
						mu.Unlock()
						return
					}
					n++
				}
				mu.Lock()
				done += n
				mu.Unlock()
			}()
		}
		wg.Wait()
		return done
	}
	pid, pidErr := serverPID(cl.BaseURL())
	cpu0, cpuErr := processCPU(pid)
	start := time.Now()
	n := run(func(i int) error {
		t := time.Now()
		r, err := cl.ExecWait(ctx, sandboxes[i%len(sandboxes)], trueCmd)
		if err != nil {
			return err
		}
		if r.Command.ExitCode == nil || *r.Command.ExitCode != 0 {
			return fmt.Errorf("true in a sandbox did not exit 0: %+v", r)
		}
		d := time.Since(t)
		mu.Lock()
		rtts = append(rtts, d)
		mu.Unlock()
		return nil
	})
	elapsed := time.Since(start)
	if len(errs) > 0 {
		return fmt.Errorf("commands under load: %w", errs[0])
	}
	res.CommandsPerS = ptr(float64(n) / elapsed.Seconds())
	cpu1, err := processCPU(pid)
	switch {
	case pidErr != nil:
		res.Notes = append(res.Notes, "server_cpu_ms_per_command: "+pidErr.Error())
	case cpuErr != nil || err != nil:
		res.Notes = append(res.Notes, fmt.Sprintf("server_cpu_ms_per_command: %v", errors.Join(cpuErr, err)))
	case n > 0:
		res.ServerCPUMsPerCommand = ptr(float64((cpu1 - cpu0).Microseconds()) / 1000 / float64(n))
	}
	sort.Slice(rtts, func(i, j int) bool { return rtts[i] < rtts[j] })
	if len(rtts) > 0 {
		res.ExecRTTP50MsLoaded = ptr(float64(rtts[len(rtts)/2].Microseconds()) / 1000)
		res.ExecRTTP99MsLoaded = ptr(float64(rtts[min(len(rtts)-1, len(rtts)*99/100)].Microseconds()) / 1000)
	}
	start = time.Now()
	n = run(func(int) error { return exec.Command("true").Run() })
	elapsed = time.Since(start)
	if len(errs) > 0 {
		return fmt.Errorf("local commands: %w", errs[0])
	}
	res.LocalCommandsPerS = ptr(float64(n) / elapsed.Seconds())
	return nil
}

// processCPU is the CPU time (user and system) pid has used, from
// /proc/PID/stat.
func processCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The fields after the command name (which may hold spaces), from
	// the state: utime and stime are the 12th and 13th.
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+1:]))
	if i < 0 || len(f) < 13 {
		return 0, fmt.Errorf("unreadable /proc/%d/stat", pid)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("unreadable /proc/%d/stat", pid)
	}
	// Clock ticks: 100 a second on Linux (USER_HZ).
	return time.Duration(ut+st) * 10 * time.Millisecond, nil
}

// loadSandboxes is how many sandboxes the load spreads over: as many as the
// host has cores, so that their CPU quotas (1 CPU each unless the template
// says otherwise) add up to what the local baseline may use.
func loadSandboxes() int { return max(1, runtime.NumCPU()) }

// randomFilesScript writes 100 files of 1 MiB of random bytes under dir,
// in a sandbox's shell or the host's.
func randomFilesScript(dir string) string {
	return fmt.Sprintf(`mkdir -p %[1]s && i=0; while [ $i -lt 100 ]; do head -c 1048576 /dev/urandom > %[1]s/$i || exit 1; i=$((i+1)); done`, dir)
}

// tarZstdBaseline times, on this host, `tar | zstd` of 100 files of 1 MiB
// of random bytes into a file made durable (the same files a sleep saves),
// and `zstd -d | tar` of that file back. zstd compresses with a thread per
// core, as the saves do.
func tarZstdBaseline(ctx context.Context, runs int) (tarS, untarS []float64, err error) {
	if _, err := exec.LookPath("zstd"); err != nil {
		return nil, nil, fmt.Errorf("zstd is not installed on this host")
	}
	dir, err := os.MkdirTemp("/var/tmp", "cove-bench-zstd-")
	if err != nil {
		return nil, nil, err
	}
	defer os.RemoveAll(dir)
	src, archive := filepath.Join(dir, "src"), filepath.Join(dir, "save.tar.zst")
	sh := func(script string) error {
		if out, err := exec.CommandContext(ctx, "sh", "-c", script).CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %v %s", script, err, out)
		}
		return nil
	}
	if err := sh(randomFilesScript(src)); err != nil {
		return nil, nil, err
	}
	for i := range runs {
		os.Remove(archive)
		start := time.Now()
		if err := sh(fmt.Sprintf("tar -C %s -cf - . | zstd -q -T0 -o %s && sync %s", src, archive, archive)); err != nil {
			return nil, nil, err
		}
		tarS = append(tarS, time.Since(start).Seconds())
		dst := filepath.Join(dir, "dst"+strconv.Itoa(i))
		if err := os.Mkdir(dst, 0o700); err != nil {
			return nil, nil, err
		}
		start = time.Now()
		if err := sh(fmt.Sprintf("zstd -q -d -c %s | tar -C %s -xf -", archive, dst)); err != nil {
			return nil, nil, err
		}
		untarS = append(untarS, time.Since(start).Seconds())
		os.RemoveAll(dst)
	}
	return tarS, untarS, nil
}
