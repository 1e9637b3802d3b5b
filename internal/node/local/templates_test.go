package local

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/cove-dev/cove/internal/node/image"
)

// TestFetchTemplate: an imported template ("sha256-…") the node lacks is
// fetched before a start, and its error is the start's; a template the
// node has, or one not imported, is never fetched.
func TestFetchTemplate(t *testing.T) {
	const missing = "sha256-0000000000000000000000000000000000000000000000000000000000000000"
	var asked []string
	refused := errors.New("blob sha256:00… is corrupt")
	n := &Node{cfg: Config{
		Templates: map[string]image.Image{"busybox": {Name: "busybox"}},
		ImagesDir: t.TempDir(),
		FetchImage: func(ctx context.Context, name string) error {
			asked = append(asked, name)
			return refused
		},
	}}
	for _, tc := range []struct {
		name    string
		wantErr bool
	}{
		{"busybox", false},
		{"managed", false},
		{missing, true},
	} {
		err := n.fetchTemplate(t.Context(), tc.name)
		if (err != nil) != tc.wantErr || (err != nil && !errors.Is(err, refused)) {
			t.Errorf("fetchTemplate(%s) = %v; want error %v", tc.name, err, tc.wantErr)
		}
	}
	if !slices.Equal(asked, []string{missing}) {
		t.Errorf("fetched %v; want only %s", asked, missing)
	}
	n.cfg.FetchImage = nil
	if err := n.fetchTemplate(t.Context(), missing); err != nil {
		t.Errorf("without FetchImage: %v", err)
	}
}
