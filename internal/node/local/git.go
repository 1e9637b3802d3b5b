package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/archive"
	"github.com/cove-dev/cove/internal/id"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/node/runtime"
	"github.com/cove-dev/cove/internal/sources"
)

// CloneGit clones a git source into a folder of a running sandbox.
//
// git runs on the node as a uid and gid held for this clone alone
// (spec.IDs), so no other process of the host can read its environment,
// which holds the token, or touch its files. It runs in a network
// namespace made for the clone and fenced like a sandbox: its only way out
// is the node's resolver and gateway, under a policy of exactly the
// repository's host and port, so a URL that leads to a private, loopback
// or node address reaches no more than the sandbox could. It writes to a
// scratch filesystem of MaxCloneBytes, admitted like a sandbox's disk, so
// a clone never takes more of the node's disk than that.
//
// The tree (with .git, whose remote has no credentials) is then read by
// descriptor, never following a link, and extracted into the sandbox as
// an archive of at most MaxCloneBytes.
func (n *Node) CloneGit(ctx context.Context, sandboxID string, spec node.GitSpec) (string, error) {
	if n.cfg.Network == nil || n.cfg.GitDir == "" {
		return "", api.Errorf(api.CodeUnprocessable, "git sources need the node's network (cove serve without --no-network)")
	}
	if spec.IDs.HostID == 0 || spec.IDs.Size == 0 {
		return "", fmt.Errorf("clone for %s: no host ids of its own", sandboxID)
	}
	u, err := url.Parse(spec.URL)
	if err != nil {
		return "", api.Errorf(api.CodeInvalidArgument, "source.url is not a valid URL")
	}
	if _, err := netip.ParseAddr(u.Hostname()); err == nil || u.Hostname() == "" {
		return "", api.Errorf(api.CodeInvalidArgument, "source.url must name the repository's host, not an address")
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"https": "443", "http": "80"}[u.Scheme]
	}
	entry := net.JoinHostPort(u.Hostname(), port)
	// Root's alone: git reaches its scratch through its own mount
	// namespace, and no one else reaches it at all.
	if err := os.MkdirAll(n.cfg.GitDir, 0o700); err != nil {
		return "", err
	}
	if err := os.Chmod(n.cfg.GitDir, 0o700); err != nil {
		return "", err
	}
	netID := id.New("git")
	release, err := n.reserve(netID, n.cfg.MaxCloneBytes)
	if err != nil {
		n.log.Info("clone not admitted", "clone", netID, "err", err)
		return "", api.Errorf(api.CodeResourceExhausted,
			"this node has no room now for a clone of up to %d MiB (--max-clone-bytes) on its data disk; try again when sandboxes end", n.cfg.MaxCloneBytes>>20)
	}
	defer release()
	uid, gid := int(spec.IDs.HostID), int(spec.IDs.HostID)
	scratch, err := runtime.MakeScratch(ctx, filepath.Join(n.cfg.GitDir, netID), n.cfg.MaxCloneBytes, uint32(uid), uint32(gid))
	if err != nil {
		return "", fmt.Errorf("make the clone's scratch disk: %w", err)
	}
	defer func() {
		if err := scratch.Close(); err != nil {
			n.log.Error("remove the clone's scratch disk", "clone", netID, "err", err)
		}
	}()
	tooLarge := func() error {
		return &api.Error{Code: api.CodeUnprocessable,
			Message: fmt.Sprintf("the clone of %s is larger than this node's clone size cap of %d MiB (--max-clone-bytes)", spec.URL, n.cfg.MaxCloneBytes>>20),
			Details: map[string]any{"reason": "size"}}
	}

	// The namespace: a holder process keeps it (and a mount namespace in
	// which the node's resolv.conf for it is bound) while git runs.
	resolv, err := n.cfg.Network.Prepare(netID)
	if err != nil {
		return "", fmt.Errorf("prepare the clone's network: %w", err)
	}
	cleanupCtx := context.WithoutCancel(ctx)
	defer func() {
		if err := n.cfg.Network.Disconnect(cleanupCtx, netID); err != nil {
			n.log.Error("remove the clone's network", "clone", netID, "err", err)
		}
	}()
	// In its mount namespace the clone's scratch is bound over /tmp, so
	// git reaches it whatever the modes of its parents (root's alone); its
	// loopback is its own (up, empty: a name for 127.0.0.1 meets nothing).
	holder := exec.Command("unshare", "--net", "--mount", "--propagation", "private", "--",
		"sh", "-c", `ip link set lo up && mount --bind "$1" /etc/resolv.conf && mount --bind "$2" /tmp && exec sleep 3600`, "sh", resolv, scratch.Root)
	holder.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := holder.Start(); err != nil {
		return "", fmt.Errorf("start the clone's namespace: %w", err)
	}
	// mntNS names the holder's mount namespace, where every process of
	// the clone runs (git is entered into it).
	mntNS := ""
	defer func() {
		syscall.Kill(-holder.Process.Pid, syscall.SIGKILL)
		holder.Wait()
		n.killUID(uid, mntNS)
	}()
	if err := waitBound(ctx, holder.Process.Pid, resolv); err != nil {
		return "", err
	}
	if mntNS, err = os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", holder.Process.Pid)); err != nil {
		return "", fmt.Errorf("read the clone's mount namespace: %w", err)
	}
	if err := n.cfg.Network.Connect(ctx, netID, holder.Process.Pid, api.NetworkPolicy{Allow: []string{entry}}, nil, nil); err != nil {
		return "", fmt.Errorf("connect the clone's network: %w", err)
	}
	pid := strconv.Itoa(holder.Process.Pid)
	commit, err := sources.Clone(ctx, sources.GitSpec{
		URL: spec.URL, Ref: spec.Ref, Depth: spec.Depth, Token: spec.Token, Dir: "/tmp/tree",
		Command: func(ctx context.Context, args []string) *exec.Cmd {
			// No file of the checkout may pass the cap, even a sparse one
			// that the scratch's size does not bound: past it git dies of
			// SIGXFSZ while it writes.
			full := append([]string{"--target", pid, "--net", "--mount",
				"--setuid", strconv.Itoa(uid), "--setgid", strconv.Itoa(gid), "--wd=/tmp", "--",
				"prlimit", "--fsize=" + strconv.FormatInt(n.cfg.MaxCloneBytes, 10), "--"}, args...)
			c := exec.CommandContext(ctx, "nsenter", full...)
			c.Dir = "/"
			return c
		},
	})
	// Whatever git left running (a helper of a killed git) goes before its
	// tree is read: nothing but root touches it from here.
	n.killUID(uid, mntNS)
	if err != nil {
		if e, ok := err.(*api.Error); (ok && e.Details["reason"] == "space") || scratch.Full() {
			return "", tooLarge()
		}
		// A refusal of the gateway says more than git's "error: 403".
		for _, o := range n.cfg.Network.PendingObservations(netID) {
			if o.Decision == "denied" {
				return "", &api.Error{Code: api.CodeUnprocessable,
					Message: fmt.Sprintf("the clone of %s could not reach %s:%d: the node's gateway refused it (the clone reaches only the repository's host, never private, loopback or node addresses)", spec.URL, o.Destination, o.Port),
					Details: map[string]any{"reason": "network"}}
			}
		}
		return "", err
	}
	// Sparse files take little of the scratch but all of their size in
	// the sandbox: the tree is measured before anything is sent.
	dir := filepath.Join(scratch.Root, "tree")
	if _, err := archive.TreeSize(dir, n.cfg.MaxCloneBytes); errors.Is(err, archive.ErrTreeTooLarge) {
		return "", tooLarge()
	} else if err != nil {
		return "", fmt.Errorf("measure the clone: %w", err)
	}
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		pw.CloseWithError(archive.WriteTree(pw, dir, n.cfg.MaxCloneBytes))
	}()
	_, err = n.WriteArchive(ctx, sandboxID, node.ArchiveSpec{Path: spec.Path, UID: spec.UID, GID: spec.GID}, pr)
	pr.CloseWithError(fmt.Errorf("extraction ended"))
	<-done
	if err != nil {
		return "", fmt.Errorf("hand the clone to the sandbox: %w", err)
	}
	return commit, nil
}

// removeLeftClones removes the scratch disks of clones that a crash of
// the node left in GitDir (a clone never outlives its CloneGit call).
func (n *Node) removeLeftClones() {
	if n.cfg.GitDir == "" {
		return
	}
	entries, err := os.ReadDir(n.cfg.GitDir)
	if err != nil {
		return // none yet
	}
	for _, e := range entries {
		dir := filepath.Join(n.cfg.GitDir, e.Name())
		n.log.Info("removing a clone left by a crash", "dir", dir)
		if err := runtime.RemoveScratch(dir); err != nil {
			n.log.Error("remove a clone left by a crash", "dir", dir, "err", err)
		}
	}
}

// killUID kills every process of the clone's mount namespace mntNS whose
// real, effective or saved uid is uid, until none is left. The uid is the
// clone's alone on this node; the namespace keeps the kill to the clone's
// own processes also where two nodes share a host and their ID ranges
// meet (test servers side by side), and a process of the uid outside the
// namespace cannot reach the clone's scratch (root's alone).
func (n *Node) killUID(uid int, mntNS string) {
	for range 100 {
		found := false
		entries, err := os.ReadDir("/proc")
		if err != nil {
			n.log.Error("list processes", "err", err)
			return
		}
		for _, e := range entries {
			p, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			if procUIDs(p, uid) && inMountNS(p, mntNS) {
				found = true
				syscall.Kill(p, syscall.SIGKILL)
			}
		}
		if !found {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	n.log.Error("processes of a clone's uid outlive it", "uid", uid)
}

// inMountNS reports whether process pid is in the mount namespace named
// ns ("mnt:[inode]"). A zombie (its namespace no longer readable) still
// counts: it is gone once reaped.
func inMountNS(pid int, ns string) bool {
	got, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", pid))
	if err != nil {
		return procZombie(pid)
	}
	return got == ns
}

// procZombie reports whether process pid has exited and waits to be reaped.
func procZombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command, which is in parentheses and may
	// hold any byte.
	i := strings.LastIndexByte(string(b), ')')
	return i >= 0 && i+2 < len(b) && b[i+2] == 'Z'
}

// procUIDs reports whether process pid has uid as its real, effective or
// saved uid. A zombie still counts: it is gone once reaped.
func procUIDs(pid, uid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f, ok := strings.CutPrefix(l, "Uid:"); ok {
			ids := strings.Fields(f)
			for _, s := range ids[:min(3, len(ids))] {
				if s == strconv.Itoa(uid) {
					return true
				}
			}
			return false
		}
	}
	return false
}

// waitBound waits until the holder has bound resolv.conf in its mount
// namespace (its /etc/resolv.conf is then that file).
func waitBound(ctx context.Context, pid int, resolv string) error {
	want, err := os.ReadFile(resolv)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, err := os.ReadFile(fmt.Sprintf("/proc/%d/root/etc/resolv.conf", pid))
		if err == nil && string(got) == string(want) {
			if link, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); filepath.Base(link) == "sleep" {
				return nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("the clone's namespace did not come up")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
