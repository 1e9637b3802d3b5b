package runtime

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/cove-dev/cove/internal/node/image"
)

// BenchmarkStartDestroy measures a whole sandbox life: disk, overlay, runc
// run, the agent's first answer, then Destroy.
func BenchmarkStartDestroy(b *testing.B) {
	r := newRuntime(b)
	for b.Loop() {
		s := testSpec()
		c, err := r.Start(b.Context(), s)
		if err != nil {
			b.Fatal(err)
		}
		c.Close()
		if err := r.Destroy(b.Context(), s.ID); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStart measures Start alone (Destroy runs with the timer stopped).
func BenchmarkStart(b *testing.B) {
	r := newRuntime(b)
	for b.Loop() {
		s := testSpec()
		c, err := r.Start(b.Context(), s)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		c.Close()
		if err := r.Destroy(b.Context(), s.ID); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

// BenchmarkRuncRunTrue is the floor: `runc run` of /bin/true in a plain
// bundle over the busybox image (its idmapped view, made once; read-only,
// no disk, no overlay, no agent),
// with the same namespaces, cgroups and seccomp as a sandbox.
func BenchmarkRuncRunTrue(b *testing.B) {
	r := newRuntime(b)
	bundle := filepath.Join(filepath.Dir(r.cfg.StateDir), "bundle")
	if err := os.MkdirAll(bundle, 0o711); err != nil {
		b.Fatal(err)
	}
	s := testSpec().withDefaults()
	if err := s.validate(); err != nil {
		b.Fatal(err)
	}
	spec := ociSpec(s, r.host("bench-true", s.IDs))
	// The image's idmapped view, made once: runc alone is timed.
	rootfs := filepath.Join(bundle, "rootfs")
	if err := os.Mkdir(rootfs, 0o755); err != nil {
		b.Fatal(err)
	}
	if err := r.mountIDMapped(testImage.Rootfs, rootfs, s.IDs); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { unmount(rootfs) })
	spec.Root.Path = rootfs
	spec.Root.Readonly = true
	spec.Process.Args = []string{"/bin/true"}
	spec.Mounts = spec.Mounts[:len(spec.Mounts)-1] // no agent
	if spec.Mounts[len(spec.Mounts)-1].Destination == image.AgentMountPoint {
		b.Fatal("agent mount left")
	}
	if err := writeSpec(filepath.Join(bundle, configFile), spec); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { removeCgroup(context.Background(), r.cgroupPath("bench-true")) })
	i := 0
	for b.Loop() {
		i++
		id := fmt.Sprintf("true-%d-%d", os.Getpid(), i)
		if out, err := r.runc.command(b.Context(), "run", "--bundle", bundle, id).CombinedOutput(); err != nil {
			b.Fatalf("runc run: %v: %s", err, out)
		}
	}
}

// BenchmarkIDMappedMount is what ID ranges add to a start: a user
// namespace for the range (made once, then kept), the image's idmapped
// view attached and, after the overlay took its clone, detached.
// BenchmarkUsernsFD is a namespace made each time (a range not used
// before).
func BenchmarkUsernsFD(b *testing.B) {
	for b.Loop() {
		f, err := usernsFD(idShift{HostID: 1 << 30, Size: 65536})
		if err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
}

func BenchmarkIDMappedMount(b *testing.B) {
	r := newRuntime(b)
	target := filepath.Join(filepath.Dir(r.cfg.StateDir), "lower")
	if err := os.MkdirAll(target, 0o700); err != nil {
		b.Fatal(err)
	}
	ids := image.IDMap{HostID: 1 << 30, Size: 65536}
	for b.Loop() {
		if err := r.mountIDMapped(testImage.Rootfs, target, ids); err != nil {
			b.Fatal(err)
		}
		if err := unmount(target); err != nil {
			b.Fatal(err)
		}
	}
}
