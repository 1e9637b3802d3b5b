package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cove-dev/cove/internal/backup"
)

func (a *app) backupCmd() *cobra.Command {
	var cfg backup.Config
	c := &cobra.Command{
		Use:   "backup --data-dir D DIR",
		Short: "Take a consistent copy of a cove serve data dir, while it runs",
		Long: "Write a backup of cove serve's data dir into DIR, which must not exist (it is made 0700, its\n" +
			"files 0600). cove serve may go on running: the database is copied in one read transaction\n" +
			"(VACUUM INTO), then the saves of asleep sandboxes and setup caches, assets, imported images and\n" +
			"each team volume's disk image (the volume frozen while it is copied: its writers wait).\n" +
			"A save store on S3 (--saves s3://…) keeps its saves there and is not copied. The admin key is\n" +
			"not in the backup (the database has only its hash); the secrets key is, only with\n" +
			"--with-secrets-key: otherwise keep it apart and give it to cove admin restore.\n" +
			"DIR/manifest.json names every file with its SHA-256. docs/operations.md, \"Backup\".",
		Example: "  cove admin backup --data-dir /var/lib/cove /srv/backups/cove-$(date +%F)\n" +
			"  cove admin backup --data-dir /var/lib/cove --with-secrets-key /mnt/offsite/cove",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg.Dir = args[0]
			cfg.Version = version
			m, err := backup.Backup(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			fmt.Fprintf(a.env.Stdout, "backup written to %s: schema version %d, %d files\n", cfg.Dir, m.SchemaVersion, len(m.Files))
			if m.Saves != "" {
				fmt.Fprintf(a.env.Stdout, "saves stay in %s and are not in the backup\n", m.Saves)
			}
			if len(m.Volumes) > 0 {
				fmt.Fprintf(a.env.Stdout, "volumes copied (each frozen while copied): %s\n", strings.Join(m.Volumes, ", "))
			}
			if len(m.VolumesNotCopied) > 0 {
				fmt.Fprintf(a.env.Stdout, "volumes not copied, their images are not on this host (on another node, or deleted meanwhile): %s\n", strings.Join(m.VolumesNotCopied, ", "))
			}
			if len(m.Unfinished) > 0 {
				fmt.Fprintf(a.env.Stdout, "not asleep at the time (restored asleep from their last save, or failed without one): %s\n", strings.Join(m.Unfinished, ", "))
			}
			if !m.SecretsKey {
				fmt.Fprintln(a.env.Stdout, "the secrets key is not in the backup: keep it apart, a restore needs it (--secrets-key-file)")
			}
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&cfg.DataDir, "data-dir", "", "cove serve's data dir")
	f.StringVar(&cfg.ImagesDir, "images-dir", "", "cove serve's --images-dir (default <data-dir>/images)")
	f.StringVar(&cfg.Saves, "saves", "", "cove serve's --saves (default <data-dir>/saves; an s3:// store is not copied)")
	f.StringVar(&cfg.SecretsKeyFile, "secrets-key-file", "", "cove serve's secrets key (default <data-dir>/secrets.key)")
	f.BoolVar(&cfg.WithSecretsKey, "with-secrets-key", false, "copy the secrets key into the backup (whoever reads the backup can then open every secret)")
	c.MarkFlagRequired("data-dir")
	return c
}

func (a *app) restoreCmd() *cobra.Command {
	var cfg backup.RestoreConfig
	c := &cobra.Command{
		Use:   "restore DIR --data-dir NEW [--secrets-key-file K]",
		Short: "Make a new data dir from a backup cove admin backup wrote",
		Long: "Check the backup in DIR against its manifest and write a data dir at NEW, which must not exist\n" +
			"or be empty. Sandboxes that were running (or between states) at backup time come back asleep\n" +
			"from their last save if the backup has one, failed otherwise. A database holding sealed\n" +
			"secrets needs a secrets key: the backup's own (--with-secrets-key) or --secrets-key-file.\n" +
			"Then start cove serve --data-dir NEW. Do not run it beside the original on one host with the\n" +
			"same nft table and subnet. docs/operations.md, \"Restore\".",
		Example: "  cove admin restore /srv/backups/cove-2026-01-31 --data-dir /var/lib/cove-restored --secrets-key-file /root/cove-secrets.key",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg.Dir = args[0]
			r, err := backup.Restore(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			fmt.Fprintf(a.env.Stdout, "restored into %s (backup of %s, schema version %d)\n", cfg.DataDir, r.Manifest.CreatedAt.Format("2006-01-02T15:04:05Z"), r.Manifest.SchemaVersion)
			if len(r.Asleep) > 0 {
				fmt.Fprintf(a.env.Stdout, "asleep, to wake from their last save: %s\n", strings.Join(r.Asleep, ", "))
			}
			if len(r.Failed) > 0 {
				fmt.Fprintf(a.env.Stdout, "failed, no save to come back from: %s\n", strings.Join(r.Failed, ", "))
			}
			if len(r.Manifest.Volumes) > 0 {
				fmt.Fprintf(a.env.Stdout, "volumes restored: %s\n", strings.Join(r.Manifest.Volumes, ", "))
			}
			if len(r.Manifest.VolumesNotCopied) > 0 {
				fmt.Fprintf(a.env.Stdout, "volumes whose files are not in the backup (a sandbox that mounts one fails to start): %s\n", strings.Join(r.Manifest.VolumesNotCopied, ", "))
			}
			if len(r.Restoring) > 0 {
				fmt.Fprintf(a.env.Stdout, "in the middle of a restore to a snapshot, which cove serve finishes when it starts: %s\n", strings.Join(r.Restoring, ", "))
			}
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&cfg.DataDir, "data-dir", "", "the new data dir (absent or empty)")
	f.StringVar(&cfg.SecretsKeyFile, "secrets-key-file", "", "the secrets key cove serve used, when the backup holds none")
	c.MarkFlagRequired("data-dir")
	return c
}
