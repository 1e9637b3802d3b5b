package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/archive"
	cove "github.com/cove-dev/cove/sdk/go"
)

// progressMin is the size from which transfers show progress (on a
// terminal only).
const progressMin = 4 << 20

func (a *app) filesCmd() *cobra.Command {
	var noWake bool
	c := &cobra.Command{
		Use:   "files",
		Short: "Read and write a sandbox's files (REF:/path names a file in sandbox REF)",
		Long: `Read and write a sandbox's files. A sandbox file is REF:PATH, where REF is the
sandbox's ID or name; a relative PATH is taken from the sandbox's workdir.
Downloads are checked against the server's sha-256 digest; uploads carry one.`,
	}
	c.PersistentFlags().BoolVar(&noWake, "no-wake", false, "fail instead of waking an asleep sandbox")
	wake := func() []cove.FileOption {
		if noWake {
			return []cove.FileOption{cove.NoWake()}
		}
		return nil
	}
	c.AddCommand(a.filesLs(wake), a.filesCat(wake), a.filesPut(wake), a.filesGet(wake),
		a.filesEdit(wake), a.filesRm(wake), a.filesMv(wake), a.filesMkdir(wake))
	return c
}

// remote is a parsed REF:PATH.
type remote struct{ ref, path string }

// parseRemote reads REF:PATH; a relative path is resolved against the
// sandbox's workdir.
func (a *app) parseRemote(ctx context.Context, cl *cove.Client, arg string) (remote, error) {
	ref, p, ok := strings.Cut(arg, ":")
	if !ok || ref == "" {
		return remote{}, fmt.Errorf("%q is not REF:PATH (e.g. mybox:/workspace/main.py)", arg)
	}
	if p == "" {
		p = "."
	}
	if !strings.HasPrefix(p, "/") {
		sb, err := cl.GetSandbox(ctx, ref)
		if err != nil {
			return remote{}, err
		}
		p = path.Join(sb.Workdir, p)
	}
	return remote{ref, p}, nil
}

func isRemote(arg string) bool {
	ref, _, ok := strings.Cut(arg, ":")
	return ok && ref != "" && !strings.ContainsRune(ref, '/')
}

func (a *app) filesLs(wake func() []cove.FileOption) *cobra.Command {
	var depth int
	c := &cobra.Command{
		Use:   "ls REF:DIR",
		Short: "List a directory",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			r, err := a.parseRemote(ctx, cl, args[0])
			if err != nil {
				return err
			}
			var all []api.FileEntry
			cursor := ""
			for {
				page, err := cl.ListFiles(ctx, r.ref, r.path, depth, 1000, cursor, wake()...)
				if err != nil {
					return err
				}
				all = append(all, page.Items...)
				if cursor = page.NextCursor; cursor == "" {
					break
				}
			}
			if a.json {
				return a.printJSON(api.List[api.FileEntry]{Items: append([]api.FileEntry{}, all...)})
			}
			tw := tabwriter.NewWriter(a.env.Stdout, 0, 4, 2, ' ', 0)
			for _, e := range all {
				name := strings.TrimPrefix(strings.TrimPrefix(e.Path, r.path), "/")
				switch e.Type {
				case api.FileTypeDir:
					name += "/"
				case api.FileTypeSymlink:
					name += " -> " + e.Target
				}
				fmt.Fprintf(tw, "%s\t%d:%d\t%d\t%s\t%s\n", e.Mode, e.UID, e.GID, e.Size, e.MTime.Local().Format("2006-01-02 15:04"), name)
			}
			return tw.Flush()
		},
	}
	c.Flags().IntVarP(&depth, "depth", "d", 1, "levels to list (1: the directory's own entries)")
	a.jsonFlag(c)
	return c
}

func (a *app) filesCat(wake func() []cove.FileOption) *cobra.Command {
	return &cobra.Command{
		Use:   "cat REF:PATH",
		Short: "Print a file (its digest is checked at the end)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			r, err := a.parseRemote(cmd.Context(), cl, args[0])
			if err != nil {
				return err
			}
			_, err = cl.DownloadFile(cmd.Context(), r.ref, r.path, a.env.Stdout, wake()...)
			return err
		},
	}
}

func (a *app) filesPut(wake func() []cove.FileOption) *cobra.Command {
	var (
		recursive bool
		mode      string
		user      string
		ifMatch   string
	)
	c := &cobra.Command{
		Use:   "put LOCAL|- REF:PATH",
		Short: "Upload a file (or, with -r, a folder) atomically",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			r, err := a.parseRemote(ctx, cl, args[1])
			if err != nil {
				return err
			}
			opts := wake()
			if user != "" {
				opts = append(opts, cove.AsUser(user))
			}
			if recursive {
				if args[0] == "-" {
					return errors.New("put -r takes a local folder, not -")
				}
				// The folder's .coveignore files apply, as they do to
				// every other folder upload (create --from, the SDKs).
				ex, err := archive.NewExcluder(nil)
				if err != nil {
					return err
				}
				pr, pw := io.Pipe()
				var wg sync.WaitGroup
				wg.Go(func() { pw.CloseWithError(archive.WriteDir(pw, args[0], ex)) })
				res, err := cl.WriteArchive(ctx, r.ref, r.path, a.progress("put", pr, -1), opts...)
				pr.CloseWithError(errors.New("upload ended"))
				wg.Wait()
				if err != nil {
					return err
				}
				fmt.Fprintf(a.env.Stderr, "%d entries, %d bytes into %s\n", res.Entries, res.Bytes, r.path)
				return nil
			}
			if mode != "" {
				opts = append(opts, cove.WithMode(mode))
			}
			if ifMatch != "" {
				opts = append(opts, cove.IfMatch(ifMatch))
			}
			var in io.Reader = a.env.Stdin
			size := int64(-1)
			if args[0] != "-" {
				f, err := os.Open(args[0])
				if err != nil {
					return err
				}
				defer f.Close()
				fi, err := f.Stat()
				if err != nil {
					return err
				}
				if fi.IsDir() {
					return fmt.Errorf("%s is a folder; use put -r", args[0])
				}
				in, size = f, fi.Size()
			}
			e, err := cl.WriteFile(ctx, r.ref, r.path, a.progress("put", in, size), opts...)
			if err != nil {
				return err
			}
			if a.json {
				return a.printJSON(e)
			}
			return nil
		},
	}
	f := c.Flags()
	f.BoolVarP(&recursive, "recursive", "r", false, "upload a folder (as tar.gz, extracted into REF:PATH), leaving out what its .coveignore files name")
	f.StringVar(&mode, "mode", "", "permission bits in octal (default: keep, or 0644 when new)")
	f.StringVarP(&user, "user", "u", "", "owner: user (default) or root")
	f.StringVar(&ifMatch, "if-match", "", "fail unless the file's version is still this one")
	a.jsonFlag(c)
	return c
}

func (a *app) filesGet(wake func() []cove.FileOption) *cobra.Command {
	var recursive bool
	c := &cobra.Command{
		Use:   "get REF:PATH [LOCAL|-]",
		Short: "Download a file (or, with -r, a folder); the digest is checked",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			r, err := a.parseRemote(ctx, cl, args[0])
			if err != nil {
				return err
			}
			local := path.Base(r.path)
			if len(args) == 2 {
				local = args[1]
			}
			if recursive {
				rc, err := cl.ReadArchive(ctx, r.ref, r.path, wake()...)
				if err != nil {
					return err
				}
				defer rc.Close()
				return archive.ExtractInto(a.progress("get", rc, -1), local)
			}
			if local == "-" {
				_, err := cl.DownloadFile(ctx, r.ref, r.path, a.env.Stdout, wake()...)
				return err
			}
			if fi, err := os.Stat(local); err == nil && fi.IsDir() {
				local = filepath.Join(local, path.Base(r.path))
			}
			return a.download(ctx, cl, r, local, wake())
		},
	}
	c.Flags().BoolVarP(&recursive, "recursive", "r", false, "download a folder (as tar.gz, extracted into LOCAL)")
	return c
}

// download writes a file next to local and renames it into place once its
// digest checked; a failed download leaves nothing.
func (a *app) download(ctx context.Context, cl *cove.Client, r remote, local string, opts []cove.FileOption) error {
	f, err := cl.ReadFile(ctx, r.ref, r.path, opts...)
	if err != nil {
		return err
	}
	defer f.Close()
	tmp, err := os.CreateTemp(filepath.Dir(local), "."+filepath.Base(local)+".part-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after the rename, a no-op
	_, err = io.CopyBuffer(tmp, a.progress("get", f, f.Size), make([]byte, 256<<10))
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if errors.Is(err, cove.ErrDigestMismatch) {
		return fmt.Errorf("%s: %w; the partial file was removed", r.path, err)
	}
	if err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), local)
}

func (a *app) filesEdit(wake func() []cove.FileOption) *cobra.Command {
	var olds, news []string
	var ifMatch string
	c := &cobra.Command{
		Use:   "edit REF:PATH --old TEXT --new TEXT [--old TEXT --new TEXT]...",
		Short: "Replace text that occurs exactly once (each pair in turn)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(olds) == 0 || len(olds) != len(news) {
				return errors.New("give --old and --new in pairs")
			}
			cl, err := a.client()
			if err != nil {
				return err
			}
			r, err := a.parseRemote(cmd.Context(), cl, args[0])
			if err != nil {
				return err
			}
			edits := make([]api.FileEdit, len(olds))
			for i := range olds {
				edits[i] = api.FileEdit{Old: olds[i], New: news[i]}
			}
			opts := wake()
			if ifMatch != "" {
				opts = append(opts, cove.IfMatch(ifMatch))
			}
			e, err := cl.EditFile(cmd.Context(), r.ref, r.path, edits, opts...)
			if err != nil {
				return err
			}
			if a.json {
				return a.printJSON(e)
			}
			return nil
		},
	}
	c.Flags().StringArrayVar(&olds, "old", nil, "text to replace; must occur exactly once")
	c.Flags().StringArrayVar(&news, "new", nil, "replacement text")
	c.Flags().StringVar(&ifMatch, "if-match", "", "fail unless the file's version is still this one")
	a.jsonFlag(c)
	return c
}

func (a *app) filesRm(wake func() []cove.FileOption) *cobra.Command {
	var recursive bool
	c := &cobra.Command{
		Use:   "rm REF:PATH...",
		Short: "Remove files (with -r, folders and what is in them)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			opts := wake()
			if recursive {
				opts = append(opts, cove.Recursive())
			}
			for _, arg := range args {
				r, err := a.parseRemote(cmd.Context(), cl, arg)
				if err != nil {
					return err
				}
				if err := cl.RemoveFile(cmd.Context(), r.ref, r.path, opts...); err != nil {
					return err
				}
			}
			return nil
		},
	}
	c.Flags().BoolVarP(&recursive, "recursive", "r", false, "remove folders with their contents")
	return c
}

func (a *app) filesMv(wake func() []cove.FileOption) *cobra.Command {
	var force bool
	c := &cobra.Command{
		Use:   "mv REF:FROM [REF:]TO",
		Short: "Move or rename a file or folder within a sandbox",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			from, err := a.parseRemote(ctx, cl, args[0])
			if err != nil {
				return err
			}
			toArg := args[1]
			if !isRemote(toArg) {
				toArg = from.ref + ":" + toArg
			}
			to, err := a.parseRemote(ctx, cl, toArg)
			if err != nil {
				return err
			}
			if to.ref != from.ref {
				return errors.New("mv moves within one sandbox; use get and put between sandboxes")
			}
			opts := wake()
			if force {
				opts = append(opts, cove.Overwrite())
			}
			_, err = cl.MoveFile(ctx, from.ref, from.path, to.path, opts...)
			return err
		},
	}
	c.Flags().BoolVarP(&force, "force", "f", false, "replace what is at the destination")
	return c
}

func (a *app) filesMkdir(wake func() []cove.FileOption) *cobra.Command {
	var user string
	c := &cobra.Command{
		Use:   "mkdir REF:DIR",
		Short: "Create a folder and its missing parents",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			r, err := a.parseRemote(cmd.Context(), cl, args[0])
			if err != nil {
				return err
			}
			opts := wake()
			if user != "" {
				opts = append(opts, cove.AsUser(user))
			}
			_, err = cl.Mkdir(cmd.Context(), r.ref, r.path, opts...)
			return err
		},
	}
	c.Flags().StringVarP(&user, "user", "u", "", "owner: user (default) or root")
	return c
}

// progress wraps r with a progress line on stderr when stderr is a
// terminal and the transfer is large (or of unknown size).
func (a *app) progress(verb string, r io.Reader, size int64) io.Reader {
	f, ok := a.env.Stderr.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) || (size >= 0 && size < progressMin) {
		return r
	}
	return &progressReader{r: r, w: f, verb: verb, size: size, start: time.Now()}
}

type progressReader struct {
	r     io.Reader
	w     io.Writer
	verb  string
	size  int64
	n     int64
	start time.Time
	last  time.Time
	shown bool
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.n += int64(n)
	now := time.Now()
	if (err != nil && p.shown) || now.Sub(p.last) >= 200*time.Millisecond {
		p.last = now
		if p.size >= 0 || p.n >= progressMin || p.shown {
			p.draw(now, err != nil)
		}
	}
	return n, err
}

func (p *progressReader) draw(now time.Time, done bool) {
	p.shown = true
	rate := float64(p.n) / max(now.Sub(p.start).Seconds(), 0.001) / (1 << 20)
	line := fmt.Sprintf("%s %s", p.verb, mib(p.n))
	if p.size > 0 {
		const width = 30
		filled := int(float64(width) * float64(p.n) / float64(p.size))
		filled = min(filled, width)
		line = fmt.Sprintf("%s [%s%s] %s / %s", p.verb, strings.Repeat("=", filled), strings.Repeat(" ", width-filled), mib(p.n), mib(p.size))
	}
	line += fmt.Sprintf("  %.1f MiB/s", rate)
	end := ""
	if done {
		end = "\n"
	}
	fmt.Fprintf(p.w, "\r\033[K%s%s", line, end)
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
