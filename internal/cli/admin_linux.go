package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cove-dev/cove/internal/store/transfer"
)

// adminCmd is `cove admin`: operations on a host's own files, run with
// the service stopped; none goes through the API.
func (a *app) adminCmd() *cobra.Command {
	admin := &cobra.Command{Use: "admin", Short: "Operate on a cove install's stores directly (the service stopped)"}
	admin.AddCommand(a.migrateStoreCmd())
	admin.AddCommand(a.backupCmd(), a.restoreCmd())
	return admin
}

func (a *app) migrateStoreCmd() *cobra.Command {
	var cfg transfer.Config
	var logLevel string
	c := &cobra.Command{
		Use:   "migrate-store --from sqlite:PATH --to postgres://… --saves s3://…",
		Short: "Move a cove serve install to PostgreSQL and an S3 save store, for cove control",
		Long: "Move a single-host install (cove serve: its SQLite store and its saves) to the stores a fleet\n" +
			"shares: every table into an empty PostgreSQL database, in one transaction, and the saves of\n" +
			"asleep sandboxes and setup caches into the save store. Stop cove serve first. Every sandbox\n" +
			"must be asleep, terminated or failed: the command names any that is not and writes nothing.\n" +
			"A database that already holds any of cove's tables is refused and left untouched. The SQLite\n" +
			"file and the saves directory are only read. Secrets move sealed: run cove control with the\n" +
			"secrets key cove serve had (--secrets-key-file, default <data-dir>/secrets.key).\n" +
			"docs/fleet.md, \"From one host to a fleet\", says the whole way.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := a.logger(logLevel)
			if err != nil {
				return err
			}
			if cfg.From == "" || cfg.To == "" || cfg.Saves == "" {
				return fmt.Errorf("give --from sqlite:PATH, --to postgres://… and --saves s3://…")
			}
			cfg.Log = log
			rep, err := transfer.Run(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			printReport(a.env.Stdout, rep)
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&cfg.From, "from", "", "the store to move: sqlite:PATH (the cove.db in cove serve's data dir)")
	f.StringVar(&cfg.To, "to", "", "an empty PostgreSQL database: postgres://USER@HOST:PORT/DB (a password from PGPASSWORD or ~/.pgpass, not the URL)")
	f.StringVar(&cfg.Saves, "saves", "", "the fleet's save store, as cove control takes it: s3://BUCKET/PREFIX?endpoint=URL")
	f.StringVar(&cfg.SavesCredentials, "saves-credentials", "", "a file of S3 credentials for --saves (AWS shared-credentials format); default AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
	f.StringVar(&cfg.FromSaves, "from-saves", "", "the save store cove serve used (default: the saves directory beside the --from file)")
	f.StringVar(&cfg.FromSavesCredentials, "from-saves-credentials", "", "a file of S3 credentials for an s3:// --from-saves")
	f.StringVar(&cfg.Scratch, "scratch", "", "a directory for the store's snapshot and one save at a time (default: beside the --from file)")
	f.StringVar(&cfg.VolumesNode, "volumes-node", "", "the --name of the node that will run on this host with cove serve's data dir: the volumes' images stay there and their rows name that node (required when there are volumes)")
	f.StringVar(&logLevel, "log-level", "warn", "debug, info, warn or error")
	return c
}

// printReport says what moved, and what the operator still has to do.
func printReport(w io.Writer, rep transfer.Report) {
	var total int64
	for _, t := range rep.Tables {
		total += t.Rows
	}
	fmt.Fprintf(w, "rows copied: %d, into %d tables:\n", total, len(rep.Tables))
	for _, t := range rep.Tables {
		if t.Rows > 0 {
			fmt.Fprintf(w, "  %-24s %d\n", t.Table, t.Rows)
		}
	}
	fmt.Fprintf(w, "saves moved: %d; asleep sandboxes placed to wake from them on any node: %d\n", len(rep.Saves), rep.Placements)
	if len(rep.Volumes) > 0 {
		fmt.Fprintf(w, "volumes left in this data dir, for the node named by --volumes-node: %s\n", strings.Join(rep.Volumes, ", "))
	}
	if len(rep.Snapshots) > 0 {
		fmt.Fprintf(w, "snapshots' files among them: %d\n", len(rep.Snapshots))
	}
	if len(rep.Images) > 0 {
		fmt.Fprintf(w, "imported images moved to the save store: %d\n", len(rep.Images))
	}
	if len(rep.ImagesWithoutBlobs) > 0 {
		fmt.Fprintf(w, "imported images that nodes cannot fetch yet (import each archive again through cove control, or copy its directory into every node's --images-dir): %s\n",
			strings.Join(rep.ImagesWithoutBlobs, ", "))
	}
	if rep.AssetBlobs > 0 {
		fmt.Fprintf(w, "assets' bytes moved to the save store: %d\n", rep.AssetBlobs)
	}
	fmt.Fprintln(w, "run cove control with --store set to the database, --saves set to the save store, and cove serve's secrets key (--secrets-key-file)")
}
