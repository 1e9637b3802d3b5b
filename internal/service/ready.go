package service

import (
	"context"
	"fmt"
	"maps"
	"os/exec"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/httpapi"
	"github.com/cove-dev/cove/internal/store"
)

// readyChecks are GET /readyz's checks of the control plane: the store
// takes a write (this replica's beat), and no template has failed (one
// still building is reported, and ready). node, when not nil, adds the
// node's checks (`cove serve`).
func (ps *planeSide) readyChecks(node map[string]httpapi.ReadyCheck) map[string]httpapi.ReadyCheck {
	checks := map[string]httpapi.ReadyCheck{
		"store": func(ctx context.Context) (string, error) {
			return "", ps.replica.beatOnce(ctx)
		},
		"templates": func(ctx context.Context) (string, error) {
			return templatesReady(ps.plane.Templates.TemplateHealth())
		},
	}
	maps.Copy(checks, node)
	return checks
}

// beatOnce records this replica alive: a write to the store.
func (r *replica) beatOnce(ctx context.Context) error {
	return r.st.BeatReplica(ctx, store.Replica{ID: r.id, Addr: r.addr.Load().(string), StartedAt: r.started})
}

// templatesReady fails when a template's build failed; those still
// building are named in the detail.
func templatesReady(health map[string]string) (string, error) {
	var building, failed []string
	for _, name := range slices.Sorted(maps.Keys(health)) {
		switch health[name] {
		case api.TemplateBuilding:
			building = append(building, name)
		case api.TemplateFailed:
			failed = append(failed, name)
		}
	}
	detail := ""
	if len(building) > 0 {
		detail = "building: " + strings.Join(building, ", ")
	}
	if len(failed) > 0 {
		return detail, fmt.Errorf("template build failed: %s", strings.Join(failed, ", "))
	}
	return detail, nil
}

// readyChecks are GET /readyz's checks of the node: runc answers, the
// fence's nftables table exists (a table deleted behind the node's back
// is not put back: the node stays unready until it restarts), and the
// data disk has its reserve free.
func (n *nodeSide) readyChecks() map[string]httpapi.ReadyCheck {
	checks := map[string]httpapi.ReadyCheck{
		"runc": func(ctx context.Context) (string, error) {
			out, err := exec.CommandContext(ctx, n.cfg.RuncPath, "--version").CombinedOutput()
			if err != nil {
				return "", fmt.Errorf("%s --version: %w: %s", n.cfg.RuncPath, err, strings.TrimSpace(string(out)))
			}
			return "", nil
		},
		"disk": func(ctx context.Context) (string, error) {
			return diskReady(n.cfg.DataDir, uint64(n.cfg.DiskReserveMiB)<<20)
		},
	}
	if !n.cfg.Network.Disabled {
		table := n.cfg.Network.Table
		checks["fence"] = func(ctx context.Context) (string, error) {
			out, err := exec.CommandContext(ctx, "nft", "list", "table", "inet", table).CombinedOutput()
			if err != nil {
				return "", fmt.Errorf("the fence's nftables table inet %s: %w: %s", table, err, strings.TrimSpace(string(out)))
			}
			return "", nil
		}
	}
	return checks
}

// diskReady fails when the data disk has less than reserve bytes free.
func diskReady(dir string, reserve uint64) (string, error) {
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		return "", fmt.Errorf("the data disk: %w", err)
	}
	free := fs.Bavail * uint64(fs.Bsize)
	detail := fmt.Sprintf("%d MiB free, %d MiB reserved", free>>20, reserve>>20)
	if free < reserve {
		return detail, fmt.Errorf("the data disk (%s) has %d MiB free, less than its %d MiB reserve", dir, free>>20, reserve>>20)
	}
	return detail, nil
}
