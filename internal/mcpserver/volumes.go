package mcpserver

import (
	"context"
	"errors"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cove-dev/cove/api"
)

func (t *tools) registerVolumes(s *mcp.Server) {
	mcp.AddTool(s, &mcp.Tool{
		Name:        "create_volume",
		Description: "Create a volume of the team: a disk of size_mib (its quota) that outlives sandboxes. create_sandbox mounts it with volumes [{name, path}], in several sandboxes at once, which see each other's writes; a write past the quota fails with ENOSPC inside.",
	}, t.createVolume)
	mcp.AddTool(s, &mcp.Tool{
		Name:        "list_volumes",
		Description: "List this team's volumes, with their size, the bytes used and the sandboxes that mount them.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, t.listVolumes)
	mcp.AddTool(s, &mcp.Tool{
		Name:        "delete_volume",
		Description: "Delete a volume and its files for good. A volume that sandboxes mount is not deleted: terminate them first.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true)},
	}, t.deleteVolume)
}

// VolumeMountIn mounts a volume in a new sandbox.
type VolumeMountIn struct {
	Name     string `json:"name" jsonschema:"the volume's name or id"`
	Path     string `json:"path" jsonschema:"where it appears in the sandbox: an absolute path, not under /proc, /sys or /dev"`
	ReadOnly bool   `json:"read_only,omitempty" jsonschema:"mount it read-only"`
}

// VolumeMount is a volume a sandbox mounts.
type VolumeMount struct {
	Name     string `json:"name"`
	Path     string `json:"path"`
	ReadOnly bool   `json:"read_only,omitempty"`
	VolumeID string `json:"volume_id"`
}

func mountsOf(ms []api.VolumeMount) []VolumeMount {
	var out []VolumeMount
	for _, m := range ms {
		out = append(out, VolumeMount(m))
	}
	return out
}

func mountsIn(ms []VolumeMountIn) []api.VolumeMount {
	var out []api.VolumeMount
	for _, m := range ms {
		out = append(out, api.VolumeMount{Name: m.Name, Path: m.Path, ReadOnly: m.ReadOnly})
	}
	return out
}

// Volume is what the tools say of a volume.
type Volume struct {
	ID        string   `json:"id"`
	Name      string   `json:"name"`
	SizeMiB   int64    `json:"size_mib"`
	UsedBytes int64    `json:"used_bytes"`
	Sandboxes []string `json:"sandboxes"`
}

func volumeOf(v api.Volume) Volume {
	sbs := v.Sandboxes
	if sbs == nil {
		sbs = []string{}
	}
	return Volume{ID: v.ID, Name: v.Name, SizeMiB: v.SizeMiB, UsedBytes: v.UsedBytes, Sandboxes: sbs}
}

// CreateVolumeIn names a new volume and its size.
type CreateVolumeIn struct {
	Name    string `json:"name" jsonschema:"the volume's name, unique in the team: 1 to 63 of a-z, 0-9 and -"`
	SizeMiB int64  `json:"size_mib" jsonschema:"its quota in MiB, at least 16"`
}

func (t *tools) createVolume(ctx context.Context, _ *mcp.CallToolRequest, in CreateVolumeIn) (*mcp.CallToolResult, Volume, error) {
	if in.Name == "" || in.SizeMiB == 0 {
		return nil, Volume{}, errors.New("name and size_mib are required")
	}
	cl := t.cl
	v, err := cl.CreateVolume(ctx, in.Name, in.SizeMiB)
	if err != nil {
		return nil, Volume{}, toolError(err)
	}
	return nil, volumeOf(v), nil
}

// ListVolumesIn bounds a list of volumes.
type ListVolumesIn struct {
	Limit int `json:"limit,omitempty" jsonschema:"at most this many (default 50)"`
}

// Volumes is a page of the team's volumes.
type Volumes struct {
	Volumes []Volume `json:"volumes"`
	More    bool     `json:"more"`
}

func (t *tools) listVolumes(ctx context.Context, _ *mcp.CallToolRequest, in ListVolumesIn) (*mcp.CallToolResult, Volumes, error) {
	limit := in.Limit
	if limit <= 0 {
		limit = 50
	}
	cl := t.cl
	page, err := cl.ListVolumes(ctx, limit, "")
	if err != nil {
		return nil, Volumes{}, toolError(err)
	}
	out := Volumes{Volumes: []Volume{}, More: page.NextCursor != ""}
	for _, v := range page.Items {
		out.Volumes = append(out.Volumes, volumeOf(v))
	}
	return nil, out, nil
}

// VolumeRef names a volume.
type VolumeRef struct {
	Volume string `json:"volume" jsonschema:"the volume's id or name"`
}

// Deleted says what was deleted.
type Deleted struct {
	Deleted string `json:"deleted"`
}

func (t *tools) deleteVolume(ctx context.Context, _ *mcp.CallToolRequest, in VolumeRef) (*mcp.CallToolResult, Deleted, error) {
	if in.Volume == "" {
		return nil, Deleted{}, errors.New("volume is required")
	}
	cl := t.cl
	if err := cl.DeleteVolume(ctx, in.Volume); err != nil {
		return nil, Deleted{}, toolError(err)
	}
	return nil, Deleted{Deleted: in.Volume}, nil
}
