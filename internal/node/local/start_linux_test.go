package local

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/netpolicy"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/node/image"
	"github.com/cove-dev/cove/internal/node/network"
	"github.com/cove-dev/cove/internal/node/saves"
)

// TestStartLaysLinkAhead: a sandbox's link is fenced while the sandbox
// starts. A started sandbox has its eth0; a start that
// fails leaves no link, no fence element, no link file and no state
// directory behind, and neither does a destroyed sandbox.
func TestStartLaysLinkAhead(t *testing.T) {
	if rootErr != nil {
		t.Skip(rootErr)
	}
	st, err := saves.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	n, ex := testNode(t, "lay", st, nil)
	b := make([]byte, 3)
	rand.Read(b)
	table := "covelocallay" + hex.EncodeToString(b)
	fenceDir := t.TempDir()
	f, err := network.New(network.Config{
		Dir: fenceDir, Subnet: netip.MustParsePrefix(fmt.Sprintf("10.%d.%d.0/24", 200+int(b[0])%50, b[1])),
		Table: table, GatewayPort: 1, DNSPort: 2,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Init(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close(context.Background()) })
	m, err := network.NewManager(f, netpolicy.NewRegistry(netpolicy.RegistryConfig{}, nil), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	n.cfg.Network = m
	n.cfg.Templates["broken"] = image.Image{Name: "broken", Rootfs: filepath.Join(rootDir, "no-such-rootfs")}

	left := func(id string) []string {
		var l []string
		if _, ok := f.Link(id); ok {
			l = append(l, "link")
		}
		if _, err := os.Stat(filepath.Join(fenceDir, id+".json")); err == nil {
			l = append(l, "link file")
		}
		if _, err := os.Stat(n.rt.StateDir(id)); err == nil {
			l = append(l, "state dir")
		}
		// The host's end of the link is named as the fence names it.
		sum := sha256.Sum256([]byte(id))
		iface := "cv" + hex.EncodeToString(sum[:])[:12]
		out, _ := exec.Command("nft", "list", "set", "inet", table, "sandboxes").CombinedOutput()
		if strings.Contains(string(out), iface) {
			l = append(l, "fenced "+iface)
		}
		if _, err := net.InterfaceByName(iface); err == nil {
			l = append(l, "interface "+iface)
		}
		return l
	}
	spec := func(id, tmpl string) node.SandboxSpec {
		return node.SandboxSpec{
			ID: id, Template: tmpl, Hostname: id, Workdir: "/workspace",
			Resources: api.Resources{CPUs: 1, MemoryMiB: 128, DiskMiB: 64},
			IDs:       node.IDRange{HostID: 1_300_000, Size: 65536}, Pids: 256,
		}
	}

	failed := "sbx_laylocalfailed" + hex.EncodeToString(b)
	if err := n.Start(t.Context(), spec(failed, "broken")); err == nil {
		t.Fatal("a start from a missing image succeeded")
	}
	if l := left(failed); len(l) > 0 {
		t.Errorf("a failed start left %v", l)
	}

	id := "sbx_laylocal" + hex.EncodeToString(b)
	if err := n.Start(t.Context(), spec(id, "busybox")); err != nil {
		t.Fatal(err)
	}
	runCmd(t, n, ex, id, "cmd_eth0", "ip -o -4 addr show eth0 | grep -q ' inet 10\\.'")
	if err := n.Destroy(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	if l := left(id); len(l) > 0 {
		t.Errorf("a destroyed sandbox left %v", l)
	}
}
