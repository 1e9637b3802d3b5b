package node

// IDRange is a sandbox's host uid/gid range: uid and gid 0 in the sandbox
// are HostID on the host, for Size IDs. Per-user kernel limits (keys,
// RLIMIT_NPROC) count per host uid, so each sandbox has its own; its files
// on its disk and in its saves belong to its range, so a sandbox keeps its
// range while it has files anywhere, asleep included.
//
// The zero IDRange stands for LegacyIDRange: sandboxes created before
// ranges were given out all shared it, and keep it.
type IDRange struct {
	HostID uint32
	Size   uint32
}

// LegacyIDRange is the range every sandbox shared before each had its own.
var LegacyIDRange = IDRange{HostID: 1000000, Size: 65536}

// Ranges given to new sandboxes: the k-th is IDRangeSize IDs from
// IDRangeFirst + k·IDRangeSize, for k < IDRangeCount. They start past
// LegacyIDRange and the subordinate ranges useradd gives host users (from
// 100000), and end before uid 2³²-1, which is no uid.
const (
	IDRangeFirst = 1 << 21
	IDRangeSize  = 1 << 16
	IDRangeCount = (1<<32-IDRangeFirst)/IDRangeSize - 1
)
