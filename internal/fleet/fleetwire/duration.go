package fleetwire

import (
	"errors"
	"strconv"
)

var errBadDuration = errors.New("fleetwire: a duration is a whole number of milliseconds")

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
