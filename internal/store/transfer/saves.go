package transfer

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/node/saves"
)

// statSaves finds the newest complete save of each of want in the source
// store, and names those that have none: a sandbox asleep without a save
// could never wake, nor a sandbox start on a snapshot without its files,
// so nothing moves until it is deleted.
func statSaves(ctx context.Context, from saves.Store, want []saved) (map[string]saves.Manifest, error) {
	found := map[string]saves.Manifest{}
	var missing []string
	for _, w := range want {
		m, err := from.Stat(ctx, w.id, "")
		switch {
		case api.ErrorCode(err) == api.CodeNotFound:
			missing = append(missing, w.id)
		case err != nil:
			return nil, fmt.Errorf("save of %s: %w", w.id, err)
		default:
			found[w.id] = m
		}
	}
	if len(missing) > 0 {
		return nil, api.Errorf(api.CodePreconditionFailed,
			"no complete save in the source's save store for %s: delete them (or wake the asleep sandboxes once) and run this again; nothing was written",
			strings.Join(missing, ", "))
	}
	return found, nil
}

// generation is the name a moved save keeps: its own, or, for a save
// from before saves had generations, one made from its time.
func generation(m saves.Manifest) string {
	if m.Generation != "" {
		return m.Generation
	}
	return saves.Generation(0, m.CreatedAt)
}

// moveSave writes the save m describes from one store into the other
// under the same generation, through scratch: the disk as a sparse image
// and the recorded output as a directory, so that both archives are
// checked against the manifest's checksums as they are read. A
// generation the target already holds complete (a move run again) is
// kept as it is.
func moveSave(ctx context.Context, from, to saves.Store, id string, m saves.Manifest, scratch string) (saves.Manifest, error) {
	gen := generation(m)
	if have, err := to.Stat(ctx, id, gen); err == nil {
		return have, nil
	} else if api.ErrorCode(err) != api.CodeNotFound {
		return saves.Manifest{}, fmt.Errorf("save %s in the target: %w", id, err)
	}
	dir, err := os.MkdirTemp(scratch, "save-")
	if err != nil {
		return saves.Manifest{}, err
	}
	defer os.RemoveAll(dir)
	files := saves.Files{Disk: filepath.Join(dir, "disk.img")}
	if m.HasOutput() {
		files.Output = filepath.Join(dir, "output")
	}
	if _, err := from.Restore(ctx, id, m.Generation, files); err != nil {
		return saves.Manifest{}, fmt.Errorf("read the save of %s: %w", id, err)
	}
	moved, err := to.Save(ctx, id, gen, files)
	if err != nil {
		return saves.Manifest{}, fmt.Errorf("write the save of %s: %w", id, err)
	}
	return moved, nil
}
