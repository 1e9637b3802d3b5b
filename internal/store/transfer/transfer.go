// Package transfer moves a single-host install (`cove serve`: a SQLite
// store, and saves in a directory) to the stores a fleet shares: a
// PostgreSQL database and an S3 save store. It is `cove admin
// migrate-store`.
//
// Every table is copied generically, by name: the target's schema has
// the same tables and columns as SQLite's, with native types, and each
// value is converted to its column's type as information_schema states
// it. The rows move in one transaction, so a target is either whole or
// left as it was found. Secrets move sealed: the control plane reading
// the target opens them with the key `cove serve` had.
//
// The source is never written: it is read through a read-only
// connection into a snapshot, which is brought to this binary's schema.
package transfer

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/node/saves"
	"github.com/cove-dev/cove/internal/store/postgres"
)

// Config says what to move where.
type Config struct {
	// From is the source store, sqlite:PATH.
	From string
	// To is the target database, postgres://… or postgresql://…; it must
	// hold none of cove's tables.
	To string
	// Saves and SavesCredentials are the target save store, as
	// `cove control --saves` takes them.
	Saves, SavesCredentials string
	// FromSaves is the source's save store; "" is the saves directory
	// beside the SQLite file (<data-dir>/saves of `cove serve`).
	FromSaves, FromSavesCredentials string
	// Scratch is a directory for the snapshot and for one save at a time
	// while it moves; "" is a temporary directory beside the SQLite file
	// (which has the room the saves took).
	Scratch string
	// VolumesNode is the name of the node that will run on this host
	// with the source's data dir, and so hold the volumes' images there
	// (volumes.go). A source with volumes and no VolumesNode is refused.
	VolumesNode string
	Log         *slog.Logger
}

// Report is what a move did.
type Report struct {
	// Tables are the rows copied by table, in the order copied.
	Tables []TableCount
	// Saves are the saves moved, by sandbox, setup cache or snapshot ID.
	Saves []string
	// Snapshots are the snapshots among them.
	Snapshots []string
	// Placements are the asleep sandboxes given a placement to wake from.
	Placements int
	// Images are the imported images (digests) whose parts were copied
	// from the source's save store into the target's.
	Images []string
	// ImagesWithoutBlobs are imported images whose parts neither store
	// has: a `cove serve` that imported them before it kept their parts
	// in its save store has them unpacked only, and they cannot be
	// rebuilt byte for byte.
	ImagesWithoutBlobs []string
	// Volumes are the volumes whose rows now name VolumesNode; their
	// files stay where they are.
	Volumes []string
	// AssetBlobs is how many assets' bytes went to the save store (one
	// per team and content, however many assets share them).
	AssetBlobs int
}

// TableCount is the rows copied into one table.
type TableCount struct {
	Table string
	Rows  int64
}

func (c *Config) validate() error {
	if !strings.HasPrefix(c.To, "postgres://") && !strings.HasPrefix(c.To, "postgresql://") {
		return api.Errorf(api.CodeInvalidArgument, "--to: want postgres://… or postgresql://…")
	}
	if c.Saves == "" {
		return api.Errorf(api.CodeInvalidArgument, "--saves: give the fleet's save store, s3://BUCKET/PREFIX?endpoint=URL")
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Run moves the store at cfg.From into cfg.To and its saves into
// cfg.Saves. It refuses, writing nothing anywhere, while any sandbox is
// not asleep, terminated or failed (naming them), while an asleep
// sandbox has no save, when the source has volumes and no
// cfg.VolumesNode (naming them) or a volume's image is not in the data
// dir, and when the target database holds any of cove's tables.
func Run(ctx context.Context, cfg Config) (Report, error) {
	var rep Report
	if err := cfg.validate(); err != nil {
		return rep, err
	}
	path, err := sqlitePath(cfg.From)
	if err != nil {
		return rep, err
	}
	dataDir := filepath.Dir(path)
	scratchRoot := cfg.Scratch
	if scratchRoot == "" {
		scratchRoot = dataDir
	}
	scratch, err := os.MkdirTemp(scratchRoot, ".migrate-store-")
	if err != nil {
		return rep, fmt.Errorf("scratch directory: %w", err)
	}
	defer os.RemoveAll(scratch)
	log := cfg.Log

	src, err := openSource(ctx, path, scratch)
	if err != nil {
		return rep, err
	}
	defer src.Close()
	if busy, err := src.unfinished(ctx); err != nil {
		return rep, err
	} else if len(busy) > 0 {
		return rep, api.Errorf(api.CodePreconditionFailed,
			"sandboxes must be asleep, terminated or failed to move; these are not: %s. Sleep or delete them, stop cove serve, and run this again; nothing was written",
			strings.Join(busy, ", "))
	}
	if rep.Volumes, err = checkVolumes(ctx, src, dataDir, cfg.VolumesNode); err != nil {
		return rep, err
	}
	before, err := refuseNonEmpty(ctx, cfg.To, src.tables)
	if err != nil {
		return rep, err
	}

	want, err := src.saves(ctx)
	if err != nil {
		return rep, err
	}
	fromSaves := cfg.FromSaves
	if fromSaves == "" {
		fromSaves = filepath.Join(dataDir, "saves")
	}
	var from saves.Store
	if len(want) > 0 {
		if from, err = openExisting(ctx, fromSaves, cfg.FromSavesCredentials); err != nil {
			return rep, fmt.Errorf("--from-saves: %w", err)
		}
		defer from.Close()
	} else if from, err = openExisting(ctx, fromSaves, cfg.FromSavesCredentials); err == nil {
		// No save to move, but imported images' parts may be there.
		defer from.Close()
	} else if errors.Is(err, fs.ErrNotExist) {
		from = nil // a serve that never saved: nothing to take
	} else {
		return rep, fmt.Errorf("--from-saves: %w", err)
	}
	to, err := saves.Open(ctx, cfg.Saves, cfg.SavesCredentials)
	if err != nil {
		return rep, fmt.Errorf("--saves: %w", err)
	}
	defer to.Close()
	manifests := map[string]saves.Manifest{}
	if len(want) > 0 {
		if manifests, err = statSaves(ctx, from, want); err != nil {
			return rep, err
		}
	}
	assets, err := statAssets(ctx, src, filepath.Join(dataDir, "assets"))
	if err != nil {
		return rep, err
	}

	// Saves first: a save in the target that no row names is harmless
	// (a run again keeps it), while a row naming a missing save is not.
	for _, w := range want {
		log.Info("moving a save", "id", w.id, "bytes", manifests[w.id].ArchiveBytes)
		m, err := moveSave(ctx, from, to, w.id, manifests[w.id], scratch)
		if err != nil {
			return rep, err
		}
		manifests[w.id] = m
		rep.Saves = append(rep.Saves, w.id)
		if w.snapshot {
			rep.Snapshots = append(rep.Snapshots, w.id)
		}
	}
	var fromBlobs saves.Blobs
	if from != nil {
		fromBlobs = from
	}
	if rep.Images, rep.ImagesWithoutBlobs, err = moveImages(ctx, src, fromBlobs, to); err != nil {
		return rep, err
	}
	// Assets' bytes too, before any row names them.
	for _, a := range assets {
		if err := moveAsset(ctx, to, a); err != nil {
			return rep, err
		}
		rep.AssetBlobs++
	}

	// The target gets cove's schema as the PostgreSQL store makes it,
	// so that the rows land in exactly the tables it reads.
	db, err := postgres.Open(ctx, cfg.To, log)
	if err != nil {
		return rep, fmt.Errorf("--to: %w", err)
	}
	defer db.Close()
	pool := db.Pool()
	if err := copyAll(ctx, pool, src, want, manifests, cfg.VolumesNode, &rep); err != nil {
		// The tables are those the schema's migrations made: dropping
		// them leaves the database as it was found.
		dctx := context.WithoutCancel(ctx)
		made, lerr := allPgTables(dctx, pool)
		if lerr == nil {
			made = slices.DeleteFunc(made, func(t string) bool { return slices.Contains(before, t) })
			lerr = dropTables(dctx, pool, made)
		}
		if lerr != nil {
			return rep, fmt.Errorf("%w (and the target's new tables could not be removed: %v)", err, lerr)
		}
		return rep, err
	}
	return rep, nil
}

// copyAll copies every table and adds the placements of moved asleep
// sandboxes, in one transaction.
func copyAll(ctx context.Context, pool *pgxpool.Pool, src *source, want []saved, manifests map[string]saves.Manifest, volumesNode string, rep *Report) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	rep.Tables = nil
	for _, t := range src.tables {
		n, err := copyTable(ctx, tx, src, t)
		if err != nil {
			return err
		}
		rep.Tables = append(rep.Tables, TableCount{Table: t, Rows: n})
	}
	if err := placeVolumes(ctx, tx, volumesNode); err != nil {
		return fmt.Errorf("volumes: %w", err)
	}
	rep.Placements = 0
	for _, w := range want {
		if !w.sandbox {
			continue
		}
		// A store a control plane kept places its sandboxes already.
		if ok, err := src.placed(ctx, w.id); err != nil || ok {
			if err != nil {
				return err
			}
			continue
		}
		m := manifests[w.id]
		if err := putPlacement(ctx, tx, placement{
			sandboxID: w.id, resources: w.resources,
			save: generation(m), bytes: m.ArchiveBytes, savedAt: m.CreatedAt,
		}); err != nil {
			return err
		}
		rep.Placements++
	}
	if err := resetSequences(ctx, tx, src.sequences); err != nil {
		return fmt.Errorf("reset sequences: %w", err)
	}
	return tx.Commit(ctx)
}

// openExisting opens a save store without making it: a directory must
// exist already (the source is never written).
func openExisting(ctx context.Context, url, creds string) (saves.Store, error) {
	if !strings.HasPrefix(url, "s3://") {
		if _, err := os.Stat(url); err != nil {
			return nil, fmt.Errorf("%w (name the store cove serve's --saves named)", err)
		}
	}
	return saves.Open(ctx, url, creds)
}
