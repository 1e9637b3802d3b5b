// Package backup takes a consistent copy of a cove serve data directory
// while the service runs, and restores such a copy into a new data
// directory.
//
// A backup is a directory (0700) of files (0600): the database as one
// SQLite file written by VACUUM INTO (a single read transaction, so one
// consistent state even while serve writes in WAL mode), tar archives of
// the saves of asleep sandboxes and setup caches, of assets and of
// imported images (modes, owners and links kept inside the archive), the
// images of the team volumes (volumes.go), the
// secrets key only when asked for, and manifest.json naming every file
// with its SHA-256.
package backup

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	_ "modernc.org/sqlite" // database/sql driver "sqlite"

	"github.com/cove-dev/cove/internal/store/sqlite"
)

// FormatVersion is the layout of a backup directory this package writes.
// Format 2 added the volumes' images (an older cove, which would restore
// without them, refuses it); format 1 backups, which have none, restore
// as before.
const FormatVersion = 2

// oldestFormat is the oldest layout restore reads.
const oldestFormat = 1

// File names inside a backup directory.
const (
	ManifestName   = "manifest.json"
	DatabaseName   = "cove.db"
	SavesName      = "saves.tar"
	AssetsName     = "assets.tar"
	ImagesName     = "images.tar"
	SecretsKeyName = "secrets.key"
)

// Manifest describes a backup; restore checks every file against it.
type Manifest struct {
	Format        int       `json:"format"`
	CoveVersion   string    `json:"cove_version"`
	SchemaVersion int       `json:"schema_version"`
	CreatedAt     time.Time `json:"created_at"`
	// Saves is "" when the saves are in the backup (saves.tar), or the
	// s3:// store that keeps them outside it.
	Saves string `json:"saves_elsewhere,omitempty"`
	// SecretsKey reports whether secrets.key is in the backup.
	SecretsKey bool `json:"secrets_key"`
	// Images are the digests of the imported images in images.tar.
	Images []string `json:"images"`
	// Unfinished are the sandboxes that were neither asleep, terminated
	// nor failed when the database was copied.
	Unfinished []string `json:"unfinished"`
	// Volumes are the volumes whose images are in the backup
	// (volume-<id>.img); VolumesNotCopied those of the copied database
	// whose images were not on this host (on another node, or deleted
	// while the backup ran).
	Volumes          []string `json:"volumes"`
	VolumesNotCopied []string `json:"volumes_not_copied,omitempty"`
	Files            []File   `json:"files"`
	// volumeRows are the volumes of the copied database.
	volumeRows []string
}

// File is one file of a backup.
type File struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// Config says what to back up and where.
type Config struct {
	DataDir string
	// Dir is the backup to write; it must not exist.
	Dir string
	// ImagesDir defaults to DataDir/images.
	ImagesDir string
	// Saves is serve's --saves: "" for DataDir/saves, a directory, or an
	// s3:// store (whose saves are not copied).
	Saves string
	// SecretsKeyFile defaults to DataDir/secrets.key; it is copied only
	// with WithSecretsKey.
	SecretsKeyFile string
	WithSecretsKey bool
	Version        string
	Now            func() time.Time
}

func (c *Config) defaults() {
	if c.ImagesDir == "" {
		c.ImagesDir = filepath.Join(c.DataDir, "images")
	}
	if c.Saves == "" {
		c.Saves = filepath.Join(c.DataDir, "saves")
	}
	if c.SecretsKeyFile == "" {
		c.SecretsKeyFile = filepath.Join(c.DataDir, "secrets.key")
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Backup writes a backup of cfg.DataDir into cfg.Dir. The database is
// copied first; saves, assets and images follow, so every asleep
// sandbox of the copied database finds its save (a save is replaced
// whole, never edited in place, and a sandbox's save is deleted only
// after it is running again). On failure the partial directory is
// removed.
func Backup(ctx context.Context, cfg Config) (m Manifest, err error) {
	cfg.defaults()
	if cfg.DataDir == "" || cfg.Dir == "" {
		return m, errors.New("backup: give the data dir and the backup directory")
	}
	db := filepath.Join(cfg.DataDir, DatabaseName)
	if _, err := os.Stat(db); err != nil {
		return m, fmt.Errorf("backup: no database in %s: %w", cfg.DataDir, err)
	}
	if err := os.Mkdir(cfg.Dir, 0o700); err != nil {
		if errors.Is(err, os.ErrExist) {
			return m, fmt.Errorf("backup: %s already exists; name a new directory", cfg.Dir)
		}
		return m, fmt.Errorf("backup: %w", err)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(cfg.Dir)
		}
	}()
	// Chmod: a umask could have narrowed nothing here, but an inherited
	// default ACL or a wider umask must not widen it either.
	if err := os.Chmod(cfg.Dir, 0o700); err != nil {
		return m, err
	}
	m = Manifest{Format: FormatVersion, CoveVersion: cfg.Version, CreatedAt: cfg.Now().UTC()}
	snap := filepath.Join(cfg.Dir, DatabaseName)
	if err := sqlite.Snapshot(ctx, db, snap); err != nil {
		return m, fmt.Errorf("backup: copy the database: %w", err)
	}
	if err := os.Chmod(snap, 0o600); err != nil {
		return m, err
	}
	if err := readDatabase(ctx, snap, &m); err != nil {
		return m, fmt.Errorf("backup: read the copied database: %w", err)
	}
	if strings.HasPrefix(cfg.Saves, "s3://") {
		m.Saves = redact(cfg.Saves)
	} else if err := writeTar(ctx, filepath.Join(cfg.Dir, SavesName), cfg.Saves, nil); err != nil {
		return m, fmt.Errorf("backup: saves: %w", err)
	}
	if err := writeTar(ctx, filepath.Join(cfg.Dir, AssetsName), filepath.Join(cfg.DataDir, "assets"), nil); err != nil {
		return m, fmt.Errorf("backup: assets: %w", err)
	}
	// Only imported images: the managed and built-in templates are built
	// again by the restored serve.
	var dirs []string
	for _, d := range m.Images {
		dirs = append(dirs, filepath.Join("v2", strings.ReplaceAll(d, ":", "-")))
	}
	if err := writeTar(ctx, filepath.Join(cfg.Dir, ImagesName), cfg.ImagesDir, dirs); err != nil {
		return m, fmt.Errorf("backup: images: %w", err)
	}
	if err := backupVolumes(ctx, cfg.DataDir, cfg.Dir, m.volumeRows, &m); err != nil {
		return m, fmt.Errorf("backup: %w", err)
	}
	if cfg.WithSecretsKey {
		if err := copyFile(cfg.SecretsKeyFile, filepath.Join(cfg.Dir, SecretsKeyName)); err != nil {
			return m, fmt.Errorf("backup: secrets key: %w", err)
		}
		m.SecretsKey = true
	}
	if m.Files, err = digests(cfg.Dir); err != nil {
		return m, fmt.Errorf("backup: %w", err)
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return m, err
	}
	if err := writeFile(filepath.Join(cfg.Dir, ManifestName), b); err != nil {
		return m, fmt.Errorf("backup: %w", err)
	}
	return m, nil
}

func openDB(path string, ro bool) (*sql.DB, error) {
	q := url.Values{"_pragma": {"busy_timeout(10000)"}}
	if ro {
		q.Set("mode", "ro")
	}
	db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: path}).EscapedPath()+"?"+q.Encode())
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	return db, nil
}

// readDatabase fills in what the manifest says of the copied database.
func readDatabase(ctx context.Context, path string, m *Manifest) error {
	db, err := openDB(path, true)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := db.QueryRowContext(ctx, "SELECT COALESCE(MAX(version), 0) FROM schema_migrations").Scan(&m.SchemaVersion); err != nil {
		return err
	}
	if m.Images, err = strs(ctx, db, `SELECT DISTINCT digest FROM images ORDER BY 1`); err != nil {
		return err
	}
	if m.Unfinished, err = strs(ctx, db, `SELECT id || ' (' || state || ')' FROM sandboxes
		WHERE state NOT IN ('asleep', 'terminated', 'failed') ORDER BY id`); err != nil {
		return err
	}
	// A database from before volumes has none.
	var n int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'volumes'`).Scan(&n); err != nil || n == 0 {
		return err
	}
	m.volumeRows, err = strs(ctx, db, `SELECT id FROM volumes ORDER BY id`)
	return err
}

func strs(ctx context.Context, db *sql.DB, q string, args ...any) ([]string, error) {
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []string{}
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// redact drops the query of an s3:// URL (it may name an endpoint with
// credentials in it).
func redact(u string) string {
	if i := strings.IndexByte(u, '?'); i >= 0 {
		return u[:i]
	}
	return u
}

// digests lists the regular files of dir (the manifest aside) with
// their SHA-256.
func digests(dir string) ([]File, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []File
	for _, e := range ents {
		if e.Name() == ManifestName {
			continue
		}
		f, err := digest(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		f.Name = e.Name()
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func digest(path string) (File, error) {
	f, err := os.Open(path)
	if err != nil {
		return File{}, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return File{}, err
	}
	return File{Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return writeFile(to, b)
}

// writeFile writes b to a new file of mode 0600.
func writeFile(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
