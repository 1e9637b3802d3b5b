package local

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/id"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/sources"
	cove "github.com/cove-dev/cove/sdk/go"
)

// CloneGit clones a git source into a folder of a running sandbox. git
// runs on the node as GitUID, in a network namespace of its own made for
// the clone, fenced like a sandbox: its only way out is the node's
// resolver and gateway, under a policy of exactly the repository's host
// and port, so a URL that leads to a private, loopback or node address
// reaches no more than the sandbox could. The tree (with .git, whose
// remote has no credentials) is then extracted into the sandbox as an
// archive; the token lives only in git's environment on the node.
func (n *Node) CloneGit(ctx context.Context, sandboxID string, spec node.GitSpec) (string, error) {
	if n.cfg.Network == nil || n.cfg.GitDir == "" {
		return "", api.Errorf(api.CodeUnprocessable, "git sources need the node's network (cove serve without --no-network)")
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
	if err := os.MkdirAll(n.cfg.GitDir, 0o711); err != nil {
		return "", err
	}
	work, err := os.MkdirTemp(n.cfg.GitDir, "clone-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(work)
	uid, gid := n.cfg.GitUID, n.cfg.GitUID
	if err := os.Chown(work, uid, gid); err != nil {
		return "", err
	}
	if err := os.Chmod(work, 0o700); err != nil {
		return "", err
	}

	// The namespace: a holder process keeps it (and a mount namespace in
	// which the node's resolv.conf for it is bound) while git runs.
	netID := id.New("git")
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
	// In its mount namespace the clone's folder is bound over /tmp, so git
	// reaches it whatever the modes of the data dir's parents; its
	// loopback is its own (up, empty: a name for 127.0.0.1 meets nothing).
	holder := exec.Command("unshare", "--net", "--mount", "--propagation", "private", "--",
		"sh", "-c", `ip link set lo up && mount --bind "$1" /etc/resolv.conf && mount --bind "$2" /tmp && exec sleep 3600`, "sh", resolv, work)
	holder.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := holder.Start(); err != nil {
		return "", fmt.Errorf("start the clone's namespace: %w", err)
	}
	defer func() {
		syscall.Kill(-holder.Process.Pid, syscall.SIGKILL)
		holder.Wait()
	}()
	if err := waitBound(ctx, holder.Process.Pid, resolv); err != nil {
		return "", err
	}
	if err := n.cfg.Network.Connect(ctx, netID, holder.Process.Pid, api.NetworkPolicy{Allow: []string{entry}}); err != nil {
		return "", fmt.Errorf("connect the clone's network: %w", err)
	}
	pid := strconv.Itoa(holder.Process.Pid)
	dir := filepath.Join(work, "tree") // /tmp/tree for git
	commit, err := sources.Clone(ctx, sources.GitSpec{
		URL: spec.URL, Ref: spec.Ref, Depth: spec.Depth, Token: spec.Token, Dir: "/tmp/tree",
		Command: func(ctx context.Context, args []string) *exec.Cmd {
			full := append([]string{"--target", pid, "--net", "--mount",
				"--setuid", strconv.Itoa(uid), "--setgid", strconv.Itoa(gid), "--wd=/tmp", "--"}, args...)
			c := exec.CommandContext(ctx, "nsenter", full...)
			c.Dir = "/"
			return c
		},
	})
	if err != nil {
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
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		pw.CloseWithError(cove.WriteDirArchive(pw, dir, nil))
	}()
	_, err = n.WriteArchive(ctx, sandboxID, node.ArchiveSpec{Path: spec.Path, UID: spec.UID, GID: spec.GID}, pr)
	pr.CloseWithError(fmt.Errorf("extraction ended"))
	<-done
	if err != nil {
		return "", fmt.Errorf("hand the clone to the sandbox: %w", err)
	}
	return commit, nil
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
