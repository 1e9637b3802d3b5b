package store

import "context"

// IDRange is the host uid/gid range a sandbox holds (internal/node's
// IDRange): HostID up to HostID+Size-1.
type IDRange struct {
	SandboxID string
	HostID    uint32
	Size      uint32
}

// IDRanges keep which sandbox holds which host ID range. A sandbox holds
// one from its create (or its start in the warm pool, before it has a
// row: ranges are keyed by sandbox ID alone) until its runtime, disk and
// save are gone; sandboxes created before ranges hold none.
type IDRanges interface {
	// AllocIDRange gives the sandbox the lowest free range of size IDs at
	// first + k·size, k < count, and returns it; a sandbox that holds a
	// range already gets that one. CodeResourceExhausted when all count
	// are held.
	AllocIDRange(ctx context.Context, sandboxID string, first, size uint32, count int) (IDRange, error)
	// GetIDRange returns the range the sandbox holds; CodeNotFound when
	// it holds none.
	GetIDRange(ctx context.Context, sandboxID string) (IDRange, error)
	// ReleaseIDRange frees the sandbox's range; releasing none is no error.
	ReleaseIDRange(ctx context.Context, sandboxID string) error
	// ListIDRanges returns every range held, by host ID.
	ListIDRanges(ctx context.Context) ([]IDRange, error)
}
