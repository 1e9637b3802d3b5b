package runtime

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// A sandbox's init (its agent) is found without running `runc state`, a
// process of its own that costs milliseconds on an idle host and tens on
// a busy one: runc writes the init's PID to initPIDFile when it starts the
// container, and Start records it with the process's start time in
// initFile. A process is the sandbox's init while it has that PID and that
// start time (the check runc's own state makes); anything else — no
// record, a dead or reused PID, a zombie — falls back to runc.
const (
	initPIDFile = "init.pid"
	initFile    = "init"
)

// recordInit reads the PID runc wrote for sandbox dir's init and records
// it beside its start time.
func recordInit(dir string) error {
	b, err := os.ReadFile(filepath.Join(dir, initPIDFile))
	if err != nil {
		return err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return fmt.Errorf("runc pid file %q: not a PID", b)
	}
	start, alive, err := procStart(pid)
	if err != nil {
		return err
	}
	if !alive {
		return fmt.Errorf("init %d ended", pid)
	}
	rec := strconv.Itoa(pid) + " " + strconv.FormatUint(start, 10) + "\n"
	return os.WriteFile(filepath.Join(dir, initFile), []byte(rec), 0o600)
}

// livePID returns the PID of sandbox dir's init when its record names a
// live process started when the init was; ok is false otherwise (no
// record, the init ended), and the caller asks runc.
func livePID(dir string) (pid int, ok bool) {
	b, err := os.ReadFile(filepath.Join(dir, initFile))
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, false
	}
	pid, err = strconv.Atoi(f[0])
	if err != nil || pid <= 0 {
		return 0, false
	}
	want, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		return 0, false
	}
	start, alive, err := procStart(pid)
	if err != nil || !alive || start != want {
		return 0, false
	}
	return pid, true
}

// procStart returns the start time of process pid (in clock ticks since
// boot, /proc/PID/stat's field 22) and whether it runs (is no zombie).
func procStart(pid int) (start uint64, alive bool, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false, err
	}
	// The command name, in parentheses, may hold spaces and parentheses:
	// the fields that follow start after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false, errors.New("malformed /proc stat")
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state), so field 22 is f[19].
	if len(f) < 20 {
		return 0, false, errors.New("malformed /proc stat")
	}
	start, err = strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return 0, false, err
	}
	return start, f[0] != "Z" && f[0] != "X", nil
}
