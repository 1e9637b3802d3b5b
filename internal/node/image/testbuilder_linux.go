package image

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"
)

// BuildBusyboxHeld builds the image called name from the host's static
// busybox, as a small stand-in for the managed image's builder in tests of
// the build's life (`cove serve --managed-builder busybox`): it reports its
// steps to progress and, while the file hold exists, waits before the last
// one, so that a test sees the template building for as long as it needs,
// without a clock.
func BuildBusyboxHeld(ctx context.Context, imagesDir, name string, progress io.Writer, hold string, log *slog.Logger) (Image, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return ensure(ctx, imagesDir, name, log, func(ctx context.Context, rootfs string) ([]string, error) {
		fmt.Fprintln(progress, "busybox test build: step 1 of 2")
		if hold != "" {
			fmt.Fprintf(progress, "busybox test build: held while %s exists\n", hold)
			for {
				if _, err := os.Stat(hold); errors.Is(err, os.ErrNotExist) {
					break
				}
				select {
				case <-ctx.Done():
					return nil, ctx.Err()
				case <-time.After(100 * time.Millisecond):
				}
			}
		}
		fmt.Fprintln(progress, "busybox test build: step 2 of 2")
		return buildBusybox(ctx, rootfs)
	})
}
