package store

import (
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
)

type sqlState string

func (s sqlState) Error() string    { return "sqlstate " + string(s) }
func (s sqlState) SQLState() string { return string(s) }

type safe bool

func (s safe) Error() string     { return "driver" }
func (s safe) SafeToRetry() bool { return bool(s) }

func TestUnavailable(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{errors.New("boom"), false},
		{fmt.Errorf("get team: %w", &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}), true},
		{fmt.Errorf("list: %w", syscall.ECONNRESET), true},
		{fmt.Errorf("scan: %w", io.ErrUnexpectedEOF), true},
		{fmt.Errorf("q: %w", sqlState("57P01")), true}, // admin_shutdown
		{fmt.Errorf("q: %w", sqlState("08006")), true}, // connection_failure
		{fmt.Errorf("q: %w", sqlState("23505")), false},
		{fmt.Errorf("q: %w", safe(true)), true},
		{fmt.Errorf("q: %w", safe(false)), false},
	} {
		if got := Unavailable(tc.err); got != tc.want {
			t.Errorf("Unavailable(%v) = %v; want %v", tc.err, got, tc.want)
		}
	}
}
