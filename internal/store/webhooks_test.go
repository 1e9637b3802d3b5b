package store

import "testing"

func TestEventMatches(t *testing.T) {
	tests := []struct {
		patterns []string
		typ      string
		want     bool
	}{
		{[]string{"*"}, "sandbox.running", true},
		{[]string{"sandbox.running"}, "sandbox.running", true},
		{[]string{"sandbox.running"}, "sandbox.runnin", false},
		{[]string{"sandbox.*"}, "sandbox.running", true},
		{[]string{"sandbox.*"}, "sandboxes.running", false},
		{[]string{"sandbox.*"}, "sandbox.", false},
		{[]string{"sandbox.*"}, "command.started", false},
		{[]string{"command.exited", "sandbox.*"}, "command.exited", true},
		{nil, "sandbox.running", false},
	}
	for _, tt := range tests {
		if got := EventMatches(tt.patterns, tt.typ); got != tt.want {
			t.Errorf("EventMatches(%q, %q) = %v; want %v", tt.patterns, tt.typ, got, tt.want)
		}
	}
}
