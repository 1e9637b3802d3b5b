// Package fsfreeze freezes a mounted filesystem for the length of a
// function: its dirty data is written out first, and writes to it wait
// until it is thawed (the processes writing go on otherwise).
package fsfreeze

import "errors"

// ErrFrozen is why a freeze of a filesystem frozen already fails.
var ErrFrozen = errors.New("frozen already")
