package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/cove-dev/cove/api"
)

const imageColumns = "id, name, team_id, digest, size_bytes, config, settings, created_at, updated_at"

// imageSettings is the settings column: cove's settings of an image.
type imageSettings struct {
	Defaults  api.ImageDefaults  `json:"defaults"`
	Limits    api.ImageLimits    `json:"limits"`
	Admission api.ImageAdmission `json:"admission"`
	Examples  []string           `json:"examples"`
}

func scanImage(r scanner) (api.Image, error) {
	var img api.Image
	var config, settings string
	if err := r.Scan(&img.ID, &img.Name, &img.TeamID, &img.Digest, &img.SizeBytes, &config, &settings, &img.CreatedAt, &img.UpdatedAt); err != nil {
		return api.Image{}, err
	}
	var d decoder
	var s imageSettings
	d.json(config, &img.Config)
	d.json(settings, &s)
	img.Defaults, img.Limits, img.Admission, img.Examples = s.Defaults, s.Limits, s.Admission, s.Examples
	normalizeImage(&img)
	return img, d.err
}

// normalizeImage makes an image's slices and maps non-nil.
func normalizeImage(img *api.Image) {
	c := &img.Config
	for _, s := range []*[]string{&c.Env, &c.Entrypoint, &c.Cmd, &c.Shell, &img.Admission.Teams, &img.Examples} {
		if *s == nil {
			*s = []string{}
		}
	}
	if c.Labels == nil {
		c.Labels = map[string]string{}
	}
}

func encodeImage(img api.Image) (config, settings string, err error) {
	normalizeImage(&img)
	if config, err = encodeJSON(img.Config); err != nil {
		return "", "", err
	}
	settings, err = encodeJSON(imageSettings{img.Defaults, img.Limits, img.Admission, img.Examples})
	return config, settings, err
}

// CreateImage stores an imported image.
func (db *DB) CreateImage(ctx context.Context, img api.Image) error {
	config, settings, err := encodeImage(img)
	if err != nil {
		return err
	}
	_, err = db.pool.Exec(ctx, "INSERT INTO images ("+imageColumns+") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
		img.ID, img.Name, img.TeamID, img.Digest, img.SizeBytes, config, settings, img.CreatedAt, img.UpdatedAt)
	switch violation(err) {
	case "unique", "primary":
		return api.Errorf(api.CodeConflict, "this team has an image called %q already; choose another name", img.Name)
	case "foreign":
		return api.Errorf(api.CodeNotFound, "team %s not found", img.TeamID)
	}
	if err != nil {
		return fmt.Errorf("insert image %s: %w", img.ID, err)
	}
	return nil
}

// GetImage finds an image by ID.
func (db *DB) GetImage(ctx context.Context, id string) (api.Image, error) {
	return db.getImage(ctx, fmt.Sprintf("image %s not found", id), "SELECT "+imageColumns+" FROM images WHERE id = $1", id)
}

// GetImageByName finds a team's image by name.
func (db *DB) GetImageByName(ctx context.Context, teamID, name string) (api.Image, error) {
	return db.getImage(ctx, fmt.Sprintf("image %q not found", name), "SELECT "+imageColumns+" FROM images WHERE team_id = $1 AND name = $2", teamID, name)
}

func (db *DB) getImage(ctx context.Context, notFound, q string, args ...any) (api.Image, error) {
	img, err := scanImage(db.pool.QueryRow(ctx, q, args...))
	if errors.Is(err, pgx.ErrNoRows) {
		return api.Image{}, api.Errorf(api.CodeNotFound, "%s", notFound)
	}
	if err != nil {
		return api.Image{}, fmt.Errorf("get image: %w", err)
	}
	return img, nil
}

// ListImages lists every image, by name.
func (db *DB) ListImages(ctx context.Context) ([]api.Image, error) {
	imgs, err := queryAll(ctx, db.pool, scanImage, "SELECT "+imageColumns+" FROM images ORDER BY name, team_id")
	if err != nil {
		return nil, fmt.Errorf("list images: %w", err)
	}
	return imgs, nil
}

// UpdateImage replaces an image's settings.
func (db *DB) UpdateImage(ctx context.Context, img api.Image) error {
	_, settings, err := encodeImage(img)
	if err != nil {
		return err
	}
	tag, err := db.pool.Exec(ctx, "UPDATE images SET settings = $1, updated_at = $2 WHERE id = $3",
		settings, img.UpdatedAt, img.ID)
	if err != nil {
		return fmt.Errorf("update image %s: %w", img.ID, err)
	}
	return mustAffect(tag, api.Errorf(api.CodeNotFound, "image %s not found", img.ID))
}

// DeleteImage removes an image.
func (db *DB) DeleteImage(ctx context.Context, id string) error {
	tag, err := db.pool.Exec(ctx, "DELETE FROM images WHERE id = $1", id)
	if err != nil {
		return fmt.Errorf("delete image %s: %w", id, err)
	}
	return mustAffect(tag, api.Errorf(api.CodeNotFound, "image %s not found", id))
}

// ImagesWithDigest counts the images stored as digest.
func (db *DB) ImagesWithDigest(ctx context.Context, digest string) (int, error) {
	var n int
	if err := db.pool.QueryRow(ctx, "SELECT count(*) FROM images WHERE digest = $1", digest).Scan(&n); err != nil {
		return 0, fmt.Errorf("count images of %s: %w", digest, err)
	}
	return n, nil
}

// TemplateInUse reports whether a live sandbox names template: one of
// teamID's by that name, or any by qualified.
func (db *DB) TemplateInUse(ctx context.Context, teamID, template, qualified string) (bool, error) {
	var n int
	err := db.pool.QueryRow(ctx,
		"SELECT count(*) FROM sandboxes WHERE ((team_id = $1 AND template = $2) OR template = $3) AND state NOT IN ('terminated', 'failed')",
		teamID, template, qualified).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("sandboxes of template %s: %w", template, err)
	}
	return n > 0, nil
}
