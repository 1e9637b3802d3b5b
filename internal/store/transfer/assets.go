package transfer

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/node/saves"
	"github.com/cove-dev/cove/internal/sources"
)

// assetBlob is the bytes of one team's asset in a `cove serve` data dir:
// <data-dir>/assets/<team>/<sha-256>, as internal/sources keeps them.
type assetBlob struct {
	team, sum, path string
}

var (
	teamIDRE = regexp.MustCompile(`^team_[a-z0-9]+$`)
	sha256RE = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// statAssets finds the bytes of every asset the source lists under dir,
// and names the assets whose bytes are missing: a fleet could never read
// them, so nothing moves until they are deleted.
func statAssets(ctx context.Context, src *source, dir string) ([]assetBlob, error) {
	rows, err := src.db.QueryContext(ctx, "SELECT id, team_id, sha256 FROM assets ORDER BY team_id, sha256, id")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []assetBlob
	var missing []string
	seen := map[string]bool{}
	for rows.Next() {
		var id, team, sum string
		if err := rows.Scan(&id, &team, &sum); err != nil {
			return nil, err
		}
		if !teamIDRE.MatchString(team) || !sha256RE.MatchString(sum) {
			return nil, fmt.Errorf("asset %s: team %q and sha-256 %q are not names its bytes can have", id, team, sum)
		}
		p := filepath.Join(dir, team, sum)
		if fi, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
			missing = append(missing, id)
			continue
		} else if err != nil {
			return nil, fmt.Errorf("asset %s: %w", id, err)
		} else if !fi.Mode().IsRegular() {
			return nil, fmt.Errorf("asset %s: %s is not a file", id, p)
		}
		if !seen[team+"/"+sum] {
			seen[team+"/"+sum] = true
			out = append(out, assetBlob{team: team, sum: sum, path: p})
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(missing) > 0 {
		return nil, api.Errorf(api.CodePreconditionFailed,
			"the bytes of assets %s are missing from %s: delete those assets and run this again; nothing was written",
			strings.Join(missing, ", "), dir)
	}
	return out, nil
}

// moveAsset publishes an asset's bytes to the save store under their
// digest, where every replica of cove control reads assets
// (sources.Shared). The store checks the bytes against the digest, so a
// file altered on disk stops the move instead of landing as the asset.
func moveAsset(ctx context.Context, to saves.Blobs, a assetBlob) error {
	f, err := os.Open(a.path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := to.PutBlob(ctx, sources.Digest(a.sum), f); err != nil {
		return fmt.Errorf("asset bytes %s of %s into the save store: %w", a.sum, a.team, err)
	}
	return nil
}
