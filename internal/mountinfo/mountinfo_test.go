package mountinfo

import "testing"

func TestUnescape(t *testing.T) {
	tests := []struct{ in, want string }{
		{"/plain", "/plain"},
		{`/with\040space`, "/with space"},
		{`/tab\011and\134backslash`, "/tab\tand\\backslash"},
		{`/not\08octal`, `/not\08octal`},
		{`/short\04`, `/short\04`},
	}
	for _, tt := range tests {
		if got := unescape(tt.in); got != tt.want {
			t.Errorf("unescape(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestUnderFindsProc(t *testing.T) {
	m, err := Under("/proc")
	if err != nil || len(m) == 0 || m[0] != "/proc" {
		t.Errorf("Under(/proc) = %v, %v", m, err)
	}
}
