package client

import (
	"errors"
	"slices"
	"testing"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/agent/wire"
)

// TestAsError covers every code the agent can send (wire.Codes) and what
// it must not: codes it has no business with, and none.
func TestAsError(t *testing.T) {
	tests := []struct {
		code string
		want api.Code // CodeInternal: an error without a code
	}{
		{wire.CodeNotFound, api.CodeNotFound},
		{wire.CodeConflict, api.CodeConflict},
		{wire.CodeInvalidArgument, api.CodeInvalidArgument},
		{wire.CodeResourceExhausted, api.CodeResourceExhausted},
		{wire.CodePermissionDenied, api.CodePermissionDenied},
		{wire.CodePreconditionFailed, api.CodePreconditionFailed},
		{wire.CodeUnprocessable, api.CodeUnprocessable},
		{wire.CodeInsufficientStorage, api.CodeInsufficientStorage},
		{"", api.CodeInternal},
		{"internal", api.CodeInternal},
		{"unauthenticated", api.CodeInternal},
		{"payload_too_large", api.CodeInternal},
		{"NOT_FOUND", api.CodeInternal},
		{"bogus", api.CodeInternal},
	}
	for _, tt := range tests {
		t.Run(tt.code, func(t *testing.T) {
			err := asError(tt.code, "the message")
			if got := api.ErrorCode(err); got != tt.want {
				t.Fatalf("code %q became %s, want %s", tt.code, got, tt.want)
			}
			var e *api.Error
			if tt.want == api.CodeInternal {
				if errors.As(err, &e) {
					t.Errorf("code %q became %#v; internal errors carry no code, so users do not see the agent's message", tt.code, e)
				}
				return
			}
			if !errors.As(err, &e) || e.Message != "the message" {
				t.Errorf("code %q became %#v, want the agent's message", tt.code, err)
			}
		})
	}

	// Every code of the protocol is in the table above, so a new one
	// cannot be added without deciding what it becomes.
	for _, code := range wire.Codes() {
		if !slices.ContainsFunc(tests, func(tt struct {
			code string
			want api.Code
		}) bool {
			return tt.code == code && tt.want != api.CodeInternal
		}) {
			t.Errorf("wire code %q is not tested, or becomes internal", code)
		}
	}
}
