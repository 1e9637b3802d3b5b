package cli

import "testing"

func TestSparkline(t *testing.T) {
	tests := []struct {
		in    []int64
		width int
		want  string
	}{
		{nil, 10, ""},
		{[]int64{0, 0}, 10, "▁▁"},
		{[]int64{0, 500, 1000}, 10, "▁▄█"},
		{[]int64{1, 9, 2, 2, 0, 8}, 3, "█▂▇"}, // folded to 9, 2, 8: the largest of each pair
	}
	for _, tt := range tests {
		if got := sparkline(tt.in, tt.width); got != tt.want {
			t.Errorf("sparkline(%v, %d) = %q; want %q", tt.in, tt.width, got, tt.want)
		}
	}
	if got := humanBytes(300 << 20); got != "300.0 MiB" {
		t.Errorf("humanBytes = %q", got)
	}
}
