package fsfreeze

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// loopExt4 makes a 16 MiB ext4 image in a temp dir, attaches it to a loop
// device and mounts it; the test's cleanup thaws, unmounts and detaches it.
func loopExt4(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a loop device")
	}
	for _, tool := range []string{"mkfs.ext4", "losetup"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s", tool)
		}
	}
	dir := t.TempDir()
	img, mnt := filepath.Join(dir, "disk.img"), filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 16<<20); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", img).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v: %s", err, out)
	}
	out, err := exec.Command("losetup", "--find", "--show", img).CombinedOutput()
	if err != nil {
		t.Fatalf("losetup: %v: %s", err, out)
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() {
		if out, err := exec.Command("losetup", "-d", dev).CombinedOutput(); err != nil {
			t.Errorf("losetup -d %s: %v: %s", dev, err, out)
		}
	})
	if err := unix.Mount(dev, mnt, "ext4", 0, ""); err != nil {
		t.Fatalf("mount %s: %v", dev, err)
	}
	t.Cleanup(func() {
		Thaw(mnt) // a failed test may leave it frozen; unmounting would wait
		if err := unix.Unmount(mnt, 0); err != nil {
			t.Errorf("unmount %s: %v", mnt, err)
		}
	})
	return mnt
}

// waitsOnFreeze reports whether this process's thread tid sleeps
// uninterruptibly on a superblock's write lock: the lock a freeze holds
// (sb_start_write and mnt_want_write wait on it).
func waitsOnFreeze(t *testing.T, tid int) bool {
	task := filepath.Join("/proc/self/task", strconv.Itoa(tid))
	b, err := os.ReadFile(filepath.Join(task, "stat"))
	if err != nil {
		t.Fatal(err)
	}
	// pid (comm) state ...: comm may hold spaces and parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		t.Fatalf("stat of thread %d: %q", tid, s)
	}
	if s[i+2] != 'D' {
		return false
	}
	stack, err := os.ReadFile(filepath.Join(task, "stack"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Contains(string(stack), "percpu_rwsem_wait") || strings.Contains(string(stack), "percpu_down_read")
}

// TestDoBlocksWritesUntilThaw: a write from another goroutine to the
// frozen filesystem waits in the kernel while fn runs and ends only after
// Do has thawed it.
func TestDoBlocksWritesUntilThaw(t *testing.T) {
	mnt := loopExt4(t)
	tids := make(chan int, 1)
	wrote := make(chan error, 1)
	done := make(chan struct{})
	started := false
	// The writer ends before the filesystem is unmounted.
	t.Cleanup(func() {
		if started {
			<-done
		}
	})
	fnDone := false
	err := Do(mnt, func() error {
		started = true
		go func() {
			defer close(done)
			runtime.LockOSThread() // the thread dies with the goroutine
			tids <- unix.Gettid()
			wrote <- os.WriteFile(filepath.Join(mnt, "f"), []byte("x"), 0o600)
		}()
		tid := <-tids
		// Wait until the writer sleeps on the freeze in the kernel; a
		// write that ends while frozen fails the test.
		for !waitsOnFreeze(t, tid) {
			select {
			case err := <-wrote:
				return errors.Join(errors.New("the write ended while the filesystem was frozen"), err)
			default:
				runtime.Gosched()
			}
		}
		fnDone = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-wrote; err != nil {
		t.Fatalf("the write after the thaw: %v", err)
	}
	if !fnDone {
		t.Fatal("fn did not finish")
	}
	if b, err := os.ReadFile(filepath.Join(mnt, "f")); err != nil || string(b) != "x" {
		t.Fatalf("the file written: %q, %v", b, err)
	}
}

// TestDoThaws: Do thaws after fn whether fn succeeds, fails or panics,
// returns fn's error, and refuses (ErrFrozen, fn not run) a filesystem
// frozen already.
func TestDoThaws(t *testing.T) {
	mnt := loopExt4(t)
	boom := errors.New("boom")
	// frozen reports whether mnt is frozen: a second freeze is refused.
	frozen := func(t *testing.T) bool {
		err := Do(mnt, func() error { return nil })
		if err != nil && !errors.Is(err, ErrFrozen) {
			t.Fatalf("probe freeze: %v", err)
		}
		return err != nil
	}
	for _, tc := range []struct {
		name  string
		fn    func() error
		want  error
		panic bool
	}{
		{name: "ok", fn: func() error { return nil }},
		{name: "fails", fn: func() error { return boom }, want: boom},
		{name: "panics", fn: func() error { panic(boom) }, panic: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var inside bool
			func() {
				defer func() {
					if r := recover(); (r != nil) != tc.panic {
						t.Errorf("recovered %v, want a panic: %v", r, tc.panic)
					}
				}()
				err := Do(mnt, func() error { inside = frozen(t); return tc.fn() })
				if !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
					t.Errorf("Do: %v, want %v", err, tc.want)
				}
			}()
			if !inside {
				t.Error("not frozen while fn ran")
			}
			if frozen(t) {
				t.Error("still frozen after Do")
			}
		})
	}

	// Frozen already: refused, fn not run, left frozen for its owner.
	ran := false
	err := Do(mnt, func() error {
		if err := Do(mnt, func() error { ran = true; return nil }); !errors.Is(err, ErrFrozen) {
			t.Errorf("a freeze of a frozen filesystem: %v, want ErrFrozen", err)
		}
		return nil
	})
	if err != nil || ran {
		t.Fatalf("nested Do: %v, inner fn ran: %v", err, ran)
	}
	// Freeze holds until Thaw.
	if err := Freeze(mnt); err != nil {
		t.Fatal(err)
	}
	if !frozen(t) {
		t.Fatal("not frozen after Freeze")
	}
	if err := Thaw(mnt); err != nil {
		t.Fatal(err)
	}
	if frozen(t) {
		t.Fatal("frozen after Thaw")
	}
	if err := Thaw(mnt); !errors.Is(err, unix.EINVAL) {
		t.Fatalf("Thaw of a thawed filesystem: %v, want EINVAL", err)
	}
}
