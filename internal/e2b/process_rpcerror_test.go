package e2b

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"connectrpc.com/connect"

	"github.com/cove-dev/cove/api"
)

// TestRPCError: cove's error codes reach E2B's clients as the connect
// codes envd answers; an error without a code says nothing of itself.
func TestRPCError(t *testing.T) {
	for _, c := range []struct {
		err  error
		want connect.Code
	}{
		{api.Errorf(api.CodeNotFound, "x"), connect.CodeNotFound},
		{api.Errorf(api.CodeInsufficientStorage, "the node's data disk is full"), connect.CodeResourceExhausted},
		{api.Errorf(api.CodeResourceExhausted, "x"), connect.CodeResourceExhausted},
		{api.Errorf(api.CodeConflict, "x"), connect.CodeFailedPrecondition},
		{fmt.Errorf("wrapped: %w", api.Errorf(api.CodeUnavailable, "x")), connect.CodeUnavailable},
		{context.DeadlineExceeded, connect.CodeDeadlineExceeded},
		{errors.New("secret detail"), connect.CodeInternal},
	} {
		got := connect.CodeOf(rpcError(c.err))
		if got != c.want {
			t.Errorf("%v: %v, want %v", c.err, got, c.want)
		}
	}
	if err := rpcError(errors.New("secret detail")); err.Error() != "internal: internal error" {
		t.Errorf("an uncoded error says %q", err)
	}
}
