package saves

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
)

// Copy writes generation fromGen ("" the newest) of the save of from as
// generation toGen of the save of to, through a sparse disk image
// restored in scratch (a directory on the node). The copy holds the disk
// only: recorded output belongs to the sandbox that ran the commands.
func Copy(ctx context.Context, st Store, from, fromGen, to, toGen, scratch string) (Manifest, error) {
	tmp, err := os.CreateTemp(scratch, ".copy-*.img")
	if err != nil {
		return Manifest{}, err
	}
	tmp.Close()
	os.Remove(tmp.Name())
	defer os.Remove(tmp.Name())
	if _, err := st.Restore(ctx, from, fromGen, Files{Disk: tmp.Name()}); err != nil {
		return Manifest{}, fmt.Errorf("read save %s: %w", from, err)
	}
	m, err := st.Save(ctx, to, toGen, Files{Disk: filepath.Clean(tmp.Name())})
	if err != nil {
		return Manifest{}, fmt.Errorf("write save %s: %w", to, err)
	}
	return m, nil
}
