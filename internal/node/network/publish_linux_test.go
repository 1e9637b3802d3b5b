package network

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestPublishPort: publishing a preview's port adds one element to the
// published set, and unpublishing removes one, however many ports the
// sandbox already publishes (each preview used to republish them all, so
// the node's work grew with the square of a sandbox's previews). Every
// script the fence gives nft is recorded through a wrapper.
func TestPublishPort(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (netns, veth, nftables)")
	}
	b := make([]byte, 3)
	rand.Read(b)
	run := hex.EncodeToString(b)
	ns := "cvpp-" + run
	table := "covepublishtest" + run
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("netns: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	sleeper := exec.Command("ip", "netns", "exec", ns, "sleep", "120")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sleeper.Process.Kill(); sleeper.Wait() })

	dir := t.TempDir()
	scripts := filepath.Join(dir, "scripts")
	wrapper := filepath.Join(dir, "nft")
	nft, err := exec.LookPath("nft")
	if err != nil {
		t.Skip("nft is not installed")
	}
	// Each script is appended to the log, then run by the real nft.
	if err := os.WriteFile(wrapper, []byte("#!/bin/sh\ns=$(cat)\nprintf '%s\\n--\\n' \"$s\" >> "+scripts+"\nprintf '%s\\n' \"$s\" | exec "+nft+" \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := New(Config{
		Dir: filepath.Join(dir, "state"), Subnet: netip.MustParsePrefix(fmt.Sprintf("10.%d.%d.0/24", 150+int(b[0])%50, b[1])),
		Table: table, GatewayPort: 15000 + uint16(b[2]), DNSPort: 15300 + uint16(b[2]), NFT: wrapper,
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Init(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close(context.Background()) })
	id := "sbx_publishtest" + run
	l, err := f.Attach(t.Context(), id, sleeper.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Detach(context.Background(), id) })

	last := func() string {
		b, err := os.ReadFile(scripts)
		if err != nil {
			t.Fatal(err)
		}
		parts := strings.Split(strings.TrimSuffix(string(b), "--\n"), "--\n")
		return parts[len(parts)-1]
	}
	elems := func(script string) int { return strings.Count(script, " "+setPublished+" {") }
	const n = 200
	for p := uint16(1000); p < 1000+n; p++ {
		if err := f.PublishPort(t.Context(), id, p); err != nil {
			t.Fatal(err)
		}
		if got := elems(last()); got != 1 {
			t.Fatalf("publishing port %d wrote %d elements:\n%s", p, got, last())
		}
	}
	out, err := exec.Command("nft", "list", "set", "inet", table, setPublished).CombinedOutput()
	if err != nil {
		t.Fatalf("%v %s", err, out)
	}
	if got := strings.Count(string(out), l.SandboxAddr.String()+" . "); got != n {
		t.Errorf("%d elements in the set, want %d", got, n)
	}
	if err := f.UnpublishPort(t.Context(), id, 1100); err != nil {
		t.Fatal(err)
	}
	// elemGone adds and deletes the one element (deleting an absent one
	// is an error to nft).
	if s := last(); elems(s) != 2 || !strings.Contains(s, " . 1100 }") {
		t.Errorf("unpublishing one port wrote:\n%s", s)
	}
	out, _ = exec.Command("nft", "list", "set", "inet", table, setPublished).CombinedOutput()
	if strings.Contains(string(out), l.SandboxAddr.String()+" . 1100,") || strings.Count(string(out), l.SandboxAddr.String()+" . ") != n-1 {
		t.Errorf("after unpublishing 1100:\n%s", out)
	}
}
