package runtime

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// niceOf reads the nice value of a thread (field 19 of its stat).
func niceOf(t *testing.T, statPath string) int {
	t.Helper()
	b, err := os.ReadFile(statPath)
	if err != nil {
		t.Fatal(err)
	}
	// The command name (field 2) may hold spaces: count from its ')'.
	fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	n, err := strconv.Atoi(fields[16]) // field 19 is the 17th after the name
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestStartNiced: a process started by startNiced runs at the lowest
// priority, and no thread of this process is left with it.
func TestStartNiced(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (gives a thread its priority back)")
	}
	cmd := exec.Command("sleep", "60")
	if err := startNiced(cmd); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	if got := niceOf(t, "/proc/"+strconv.Itoa(cmd.Process.Pid)+"/stat"); got != backgroundNice {
		t.Errorf("nice of the started process = %d, want %d", got, backgroundNice)
	}
	if low := lowThreads(t); len(low) > 0 {
		t.Errorf("threads of this process at a low priority: %v", low)
	}
}

// lowThreads are the threads of this process whose nice is not 0.
func lowThreads(t *testing.T) []string {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	var low []string
	for _, task := range tasks {
		b, err := os.ReadFile("/proc/self/task/" + task.Name() + "/stat")
		if err != nil {
			continue // gone
		}
		fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if fields[16] != "0" {
			low = append(low, task.Name()+":"+fields[16])
		}
	}
	return low
}

// TestBackgroundStart: a sandbox started in the background runs at the
// normal priority once started, its agent and the commands it runs alike.
func TestBackgroundStart(t *testing.T) {
	r := newRuntime(t)
	s := testSpec()
	s.Background = true
	c := start(t, r, s)
	st, err := r.State(t.Context(), s.ID)
	if err != nil {
		t.Fatal(err)
	}
	tasks, err := os.ReadDir("/proc/" + strconv.Itoa(st.PID) + "/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		if got := niceOf(t, "/proc/"+strconv.Itoa(st.PID)+"/task/"+task.Name()+"/stat"); got != 0 {
			t.Errorf("thread %s of the agent has nice %d, want 0", task.Name(), got)
		}
	}
	out, _, exit := run(t, c, 0, "cat", "/proc/self/stat")
	if exit.ExitCode != 0 {
		t.Fatalf("cat /proc/self/stat: %+v", exit)
	}
	fields := strings.Fields(out[strings.LastIndexByte(out, ')')+1:])
	if fields[16] != "0" {
		t.Errorf("a command in the sandbox has nice %s, want 0", fields[16])
	}
}
