package local

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/node/saves"
)

// Snapshot freezes the files of sandbox id as snapshot snap: a running
// sandbox's disk is copied at one moment (its filesystem frozen for the
// copy, its commands going on), saved in the save store and kept as a
// layer on this node; an asleep sandbox's save is copied in the store.
func (n *Node) Snapshot(ctx context.Context, id, snap string, asleep bool, save string) (node.SaveInfo, error) {
	if asleep {
		scratch, err := n.rt.LayerTemp(snap)
		if err != nil {
			return node.SaveInfo{}, err
		}
		m, err := saves.Copy(ctx, n.cfg.Saves, id, save, snap, n.generation(), filepath.Dir(scratch))
		return snapInfo(m), err
	}
	if _, err := n.get(id); err != nil {
		return node.SaveInfo{}, err
	}
	tmp, err := n.rt.LayerTemp(snap)
	if err != nil {
		return node.SaveInfo{}, err
	}
	defer os.Remove(tmp)
	if _, err := n.rt.Freeze(ctx, id, tmp); err != nil {
		return node.SaveInfo{}, err
	}
	m, err := n.cfg.Saves.Save(ctx, snap, n.generation(), saves.Files{Disk: tmp})
	if err != nil {
		return node.SaveInfo{}, fmt.Errorf("save snapshot %s: %w", snap, err)
	}
	if err := n.rt.AddLayer(ctx, snap, tmp); err != nil {
		// The store has it: a start fetches it from there.
		n.log.Warn("keep a snapshot's layer", "snapshot", snap, "err", err)
	}
	return snapInfo(m), nil
}

func snapInfo(m saves.Manifest) node.SaveInfo {
	info := saveInfo(m)
	info.SHA256 = m.SHA256
	return info
}

// DropSnapshot removes a snapshot's save and its layer on this node.
func (n *Node) DropSnapshot(ctx context.Context, snap string) error {
	if err := n.cfg.Saves.Delete(ctx, snap); err != nil {
		return err
	}
	return n.rt.RemoveLayer(ctx, snap)
}

// fetchLayers brings the layers a sandbox stands on that this node lacks
// from the save store.
func (n *Node) fetchLayers(ctx context.Context, layers []node.Layer) error {
	for _, l := range layers {
		if n.rt.HasLayer(l.Snapshot) {
			continue
		}
		tmp, err := n.rt.LayerTemp(l.Snapshot)
		if err != nil {
			return err
		}
		if _, err := n.cfg.Saves.Restore(ctx, l.Snapshot, "", saves.Files{Disk: tmp}); err != nil {
			os.Remove(tmp)
			if api.ErrorCode(err) == api.CodeNotFound {
				return api.Errorf(api.CodeNotFound, "snapshot %s has no files in the save store", l.Snapshot)
			}
			return fmt.Errorf("fetch snapshot %s: %w", l.Snapshot, err)
		}
		if err := n.rt.AddLayer(ctx, l.Snapshot, tmp); err != nil {
			os.Remove(tmp)
			return err
		}
	}
	return nil
}
