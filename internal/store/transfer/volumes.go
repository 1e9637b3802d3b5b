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

	"github.com/jackc/pgx/v5"

	"github.com/cove-dev/cove/api"
)

// A team volume's files are an ext4 image on the data disk of the host
// that made it (<data-dir>/volumes/<id>/disk.img), not a save: the save
// store does not carry them, and no node fetches a volume from it. So a
// move keeps them where they are: the node that will run on this host,
// with this data dir, holds them, and the volumes' rows name it
// (Config.VolumesNode). Without that name a move of an install that has
// volumes is refused before anything is written.

// volumeIDPattern is what a volume's ID may be (the node's IDs).
var volumeIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)

// volumes lists the source's volumes as "id (team/name)", and their IDs.
func (s *source) volumes(ctx context.Context) (names, ids []string, err error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id, team_id, name FROM volumes ORDER BY id`)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var id, team, name string
		if err := rows.Scan(&id, &team, &name); err != nil {
			return nil, nil, err
		}
		names = append(names, id+" ("+team+"/"+name+")")
		ids = append(ids, id)
	}
	return names, ids, rows.Err()
}

// checkVolumes refuses a move of volumes no node would hold: with no
// VolumesNode, or with an image missing from dataDir.
func checkVolumes(ctx context.Context, src *source, dataDir, node string) ([]string, error) {
	names, ids, err := src.volumes(ctx)
	if err != nil || len(ids) == 0 {
		return nil, err
	}
	if node == "" {
		return nil, api.Errorf(api.CodePreconditionFailed,
			"volumes %s keep their files in %s on this host, which the save store does not carry: run the fleet's node on this host with --data-dir %s and give its --name as --volumes-node NAME, or delete the volumes; nothing was written",
			strings.Join(names, ", "), filepath.Join(dataDir, "volumes"), dataDir)
	}
	var missing []string
	for i, id := range ids {
		if !volumeIDPattern.MatchString(id) {
			return nil, fmt.Errorf("volume %q: not a volume ID", id)
		}
		if _, err := os.Stat(filepath.Join(dataDir, "volumes", id, "disk.img")); errors.Is(err, fs.ErrNotExist) {
			missing = append(missing, names[i])
		} else if err != nil {
			return nil, err
		}
	}
	if len(missing) > 0 {
		return nil, api.Errorf(api.CodePreconditionFailed,
			"volumes %s have no image in %s: delete them and run this again; nothing was written",
			strings.Join(missing, ", "), filepath.Join(dataDir, "volumes"))
	}
	return ids, nil
}

// placeVolumes names node as the holder of every moved volume.
func placeVolumes(ctx context.Context, tx pgx.Tx, node string) error {
	if node == "" {
		return nil
	}
	_, err := tx.Exec(ctx, `UPDATE volumes SET node = $1`, node)
	return err
}
