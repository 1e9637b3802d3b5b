package cli

import (
	"slices"
	"testing"

	"github.com/cove-dev/cove/api"
)

func TestSameEvents(t *testing.T) {
	tests := []struct {
		a, b []string
		want bool
	}{
		{nil, nil, true},
		{nil, []string{"*"}, true},
		{[]string{"sandbox.*", "command.exited"}, []string{"command.exited", "sandbox.*", "sandbox.*"}, true},
		{[]string{"sandbox.expired"}, nil, false},
		{[]string{"sandbox.expired"}, []string{"sandbox.running"}, false},
	}
	for _, tt := range tests {
		if got := sameEvents(tt.a, tt.b); got != tt.want {
			t.Errorf("sameEvents(%q, %q) = %t, want %t", tt.a, tt.b, got, tt.want)
		}
	}
}

func TestPreviewArgs(t *testing.T) {
	tests := []struct {
		req  api.CreatePreviewRequest
		want []string
	}{
		{api.CreatePreviewRequest{Port: 8000, Visibility: api.VisibilityPrivate}, []string{"demo", "8000"}},
		{api.CreatePreviewRequest{Port: 3000, Visibility: api.VisibilityPublic, Wake: true}, []string{"demo", "3000", "--public", "--wake"}},
	}
	for _, tt := range tests {
		if got := previewArgs("demo", tt.req); !slices.Equal(got, tt.want) {
			t.Errorf("previewArgs(%+v) = %q, want %q", tt.req, got, tt.want)
		}
	}
}
