package backup

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/cove-dev/cove/internal/node/saves"
)

// RestoreConfig says which backup to restore where.
type RestoreConfig struct {
	Dir     string
	DataDir string
	// SecretsKeyFile is the secrets key to restore with when the backup
	// holds none; it is copied into DataDir/secrets.key.
	SecretsKeyFile string
}

// Restored reports what a restore did to sandboxes that were not asleep
// when the backup was taken.
type Restored struct {
	Manifest Manifest
	Asleep   []string // woken from their last save on demand
	Failed   []string // no save to come back from
	// Restoring were being returned to a snapshot: they are kept so, and
	// the restored serve finishes the restore (its snapshot's files are
	// saves in the backup).
	Restoring []string
}

// restoring begins the state reason of a sandbox in the middle of a
// restore to a snapshot (lifecycle.Restoring).
const restoring = "restoring to snapshot "

// ErrNotEmpty is wrapped by the error of restoring into a data dir that
// holds anything.
var ErrNotEmpty = errors.New("the target data dir exists and is not empty")

// ErrNoSecretsKey is wrapped by the error of restoring a database that
// holds sealed secrets with no key to open them.
var ErrNoSecretsKey = errors.New("no secrets key")

// Restore checks the backup at cfg.Dir against its manifest and writes
// a data dir at cfg.DataDir from it. Sandboxes that were neither
// asleep, terminated nor failed at backup time become asleep when the
// backup holds a complete save of theirs, failed (with that reason)
// when not. On any failure the target is removed again.
func Restore(ctx context.Context, cfg RestoreConfig) (r Restored, err error) {
	if cfg.Dir == "" || cfg.DataDir == "" {
		return r, errors.New("restore: give the backup directory and --data-dir")
	}
	if ents, err := os.ReadDir(cfg.DataDir); err == nil && len(ents) > 0 {
		return r, fmt.Errorf("restore: %w: %s; restore into a new directory", ErrNotEmpty, cfg.DataDir)
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return r, fmt.Errorf("restore: %w", err)
	}
	m, err := Verify(cfg.Dir)
	if err != nil {
		return r, err
	}
	r.Manifest = m
	sealed, err := countSecrets(ctx, filepath.Join(cfg.Dir, DatabaseName))
	if err != nil {
		return r, fmt.Errorf("restore: read the backup's database: %w", err)
	}
	key := cfg.SecretsKeyFile
	if key == "" && m.SecretsKey {
		key = filepath.Join(cfg.Dir, SecretsKeyName)
	}
	if key == "" && sealed > 0 {
		return r, fmt.Errorf("restore: %w: the backup's database holds %d sealed secrets and the backup has no secrets key (it was taken without --with-secrets-key); give the key cove serve used with --secrets-key-file", ErrNoSecretsKey, sealed)
	}
	var keyBytes []byte
	if key != "" {
		if keyBytes, err = os.ReadFile(key); err != nil {
			return r, fmt.Errorf("restore: secrets key: %w", err)
		}
	}
	created := false
	// 0711, as cove serve keeps it: a sandbox's root must search it to
	// reach its own state below; nothing in it can be listed.
	if err := os.Mkdir(cfg.DataDir, 0o711); err == nil {
		created = true
	} else if !errors.Is(err, os.ErrExist) {
		return r, fmt.Errorf("restore: %w", err)
	}
	defer func() {
		if err == nil {
			return
		}
		if created {
			os.RemoveAll(cfg.DataDir)
			return
		}
		ents, _ := os.ReadDir(cfg.DataDir)
		for _, e := range ents {
			os.RemoveAll(filepath.Join(cfg.DataDir, e.Name()))
		}
	}()
	if err := os.Chmod(cfg.DataDir, 0o711); err != nil {
		return r, err
	}
	db := filepath.Join(cfg.DataDir, DatabaseName)
	if err := copyFile(filepath.Join(cfg.Dir, DatabaseName), db); err != nil {
		return r, fmt.Errorf("restore: database: %w", err)
	}
	for _, a := range []struct{ file, dir string }{
		{SavesName, "saves"}, {AssetsName, "assets"}, {ImagesName, "images"},
	} {
		src := filepath.Join(cfg.Dir, a.file)
		if _, err := os.Stat(src); errors.Is(err, os.ErrNotExist) {
			continue
		}
		dst := filepath.Join(cfg.DataDir, a.dir)
		if err := os.Mkdir(dst, 0o700); err != nil {
			return r, err
		}
		if err := extractTar(ctx, src, dst); err != nil {
			return r, fmt.Errorf("restore: %s: %w", a.file, err)
		}
	}
	if err := restoreVolumes(ctx, cfg.Dir, cfg.DataDir, m); err != nil {
		return r, fmt.Errorf("restore: volumes: %w", err)
	}
	if keyBytes != nil {
		if err := writeFile(filepath.Join(cfg.DataDir, SecretsKeyName), keyBytes); err != nil {
			return r, fmt.Errorf("restore: secrets key: %w", err)
		}
	}
	if err := settle(ctx, db, filepath.Join(cfg.DataDir, "saves"), m.Saves != "", &r); err != nil {
		return r, fmt.Errorf("restore: %w", err)
	}
	return r, nil
}

// Verify reads a backup's manifest and checks every file it names
// (and that no other is there) against its size and SHA-256.
func Verify(dir string) (Manifest, error) {
	var m Manifest
	b, err := os.ReadFile(filepath.Join(dir, ManifestName))
	if err != nil {
		return m, fmt.Errorf("restore: %s is not a cove backup: %w", dir, err)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("restore: %s: the manifest is unreadable: %w", dir, err)
	}
	if m.Format < oldestFormat || m.Format > FormatVersion {
		return m, fmt.Errorf("restore: %s has backup format %d; this cove reads formats %d to %d", dir, m.Format, oldestFormat, FormatVersion)
	}
	if m.Format < 2 && len(m.Volumes) > 0 {
		return m, fmt.Errorf("restore: %s has backup format %d, which holds no volumes, and its manifest names some", dir, m.Format)
	}
	have, err := digests(dir)
	if err != nil {
		return m, fmt.Errorf("restore: %w", err)
	}
	want := map[string]File{}
	for _, f := range m.Files {
		if f.Name != filepath.Base(f.Name) || f.Name == "." || f.Name == ".." {
			return m, fmt.Errorf("restore: the manifest names %q, not a file of the backup", f.Name)
		}
		if _, err := hex.DecodeString(f.SHA256); err != nil || len(f.SHA256) != 64 {
			return m, fmt.Errorf("restore: the manifest's digest of %s is malformed", f.Name)
		}
		want[f.Name] = f
	}
	for _, h := range have {
		w, ok := want[h.Name]
		if !ok {
			return m, fmt.Errorf("restore: %s holds %s, which its manifest does not name", dir, h.Name)
		}
		if w.Size != h.Size || w.SHA256 != h.SHA256 {
			return m, fmt.Errorf("restore: %s in %s does not match its manifest (sha-256 %s, manifest %s): the backup is damaged", h.Name, dir, h.SHA256, w.SHA256)
		}
		delete(want, h.Name)
	}
	for name := range want {
		return m, fmt.Errorf("restore: %s lacks %s, which its manifest names", dir, name)
	}
	if _, err := os.Stat(filepath.Join(dir, DatabaseName)); err != nil {
		return m, fmt.Errorf("restore: %s holds no database", dir)
	}
	return m, nil
}

func countSecrets(ctx context.Context, path string) (int, error) {
	db, err := openDB(path, true)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	var n int
	err = db.QueryRowContext(ctx, "SELECT COUNT(*) FROM secrets").Scan(&n)
	return n, err
}

// settle puts every sandbox that was between states at backup time to
// asleep (a complete save of it is in the restored saves) or failed; one
// in the middle of a restore to a snapshot is left to serve to finish.
func settle(ctx context.Context, path, savesDir string, savesElsewhere bool, r *Restored) error {
	db, err := openDB(path, false)
	if err != nil {
		return err
	}
	defer db.Close()
	if r.Restoring, err = strs(ctx, db, `SELECT id FROM sandboxes
		WHERE state = 'waking' AND substr(state_reason, 1, ?) = ? ORDER BY id`, len(restoring), restoring); err != nil {
		return err
	}
	rows, err := strs(ctx, db, `SELECT id || ' ' || state FROM sandboxes
		WHERE state NOT IN ('asleep', 'terminated', 'failed')
		AND NOT (state = 'waking' AND substr(state_reason, 1, ?) = ?) ORDER BY id`, len(restoring), restoring)
	if err != nil {
		return err
	}
	var store *saves.Dir
	if !savesElsewhere {
		if store, err = saves.NewDir(savesDir); err != nil {
			return err
		}
	}
	for _, row := range rows {
		id, state, _ := strings.Cut(row, " ")
		hasSave := false
		if store != nil {
			_, err := store.Stat(ctx, id, "")
			hasSave = err == nil
		}
		if hasSave {
			_, err = db.ExecContext(ctx, `UPDATE sandboxes SET state = 'asleep',
				state_reason = ? WHERE id = ?`, "restored from a backup taken while it was "+state+"; it wakes from its last save", id)
			r.Asleep = append(r.Asleep, id)
		} else {
			reason := "restored from a backup taken while it was " + state + "; it had no save to come back from"
			if savesElsewhere {
				reason = "restored from a backup taken while it was " + state + "; its saves are in the S3 save store, which a restore does not check"
			}
			_, err = db.ExecContext(ctx, `UPDATE sandboxes SET state = 'failed', state_reason = ? WHERE id = ?`, reason, id)
			r.Failed = append(r.Failed, id)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
