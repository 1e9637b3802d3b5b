package mountinfo

import (
	"fmt"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

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

func TestOfDeviceFindsProc(t *testing.T) {
	var st unix.Stat_t
	if err := unix.Stat("/proc", &st); err != nil {
		t.Fatal(err)
	}
	dev := fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
	m, err := OfDevice(dev)
	if err != nil || !slices.Contains(m, "/proc") {
		t.Errorf("OfDevice(%s) = %v, %v", dev, m, err)
	}
	if m, err := OfDevice("4095:1048575"); err != nil || len(m) != 0 {
		t.Errorf("OfDevice of no device = %v, %v", m, err)
	}
}
