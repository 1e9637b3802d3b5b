package netpolicy

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		allow   []string
		want    []string // canonical entries
		wantErr string   // substring; "" = no error
	}{
		{name: "nil denies all", allow: nil, want: nil},
		{name: "blank entries ignored", allow: []string{"", "  "}, want: nil},
		{name: "host", allow: []string{"API.GitHub.com."}, want: []string{"api.github.com"}},
		{name: "host port", allow: []string{"api.github.com:443"}, want: []string{"api.github.com:443"}},
		{name: "single label", allow: []string{"db:5432"}, want: []string{"db:5432"}},
		{name: "suffix", allow: []string{"*.pythonhosted.org"}, want: []string{"*.pythonhosted.org"}},
		{name: "suffix port", allow: []string{"*.pythonhosted.org:443"}, want: []string{"*.pythonhosted.org:443"}},
		{name: "cidr", allow: []string{"192.0.2.0/24"}, want: []string{"192.0.2.0/24"}},
		{name: "cidr masked", allow: []string{"192.0.2.7/24"}, want: []string{"192.0.2.0/24"}},
		{name: "cidr port", allow: []string{"192.0.2.0/24:5432"}, want: []string{"192.0.2.0/24:5432"}},
		{name: "ip", allow: []string{"192.0.2.7"}, want: []string{"192.0.2.7/32"}},
		{name: "ip port", allow: []string{"192.0.2.7:22"}, want: []string{"192.0.2.7/32:22"}},
		{name: "ipv6 cidr", allow: []string{"2001:DB8::/32"}, want: []string{"2001:db8::/32"}},
		{name: "ipv6 cidr port", allow: []string{"2001:db8::/32:443"}, want: []string{"2001:db8::/32:443"}},
		{name: "ipv6 bracket port", allow: []string{"[2001:db8::/32]:443"}, want: []string{"2001:db8::/32:443"}},
		{name: "ipv6 address", allow: []string{"::1"}, want: []string{"::1/128"}},
		{name: "ipv6 address port", allow: []string{"[::1]:80"}, want: []string{"::1/128:80"}},
		{name: "several", allow: []string{"a.test", "*.b.test:443", "10.0.0.0/8:5432"}, want: []string{"a.test", "*.b.test:443", "10.0.0.0/8:5432"}},

		{name: "url", allow: []string{"https://example.com"}, wantErr: `"https://example.com"`},
		{name: "bare star", allow: []string{"*"}, wantErr: `"*"`},
		{name: "inner wildcard", allow: []string{"api.*.com"}, wantErr: "wildcard"},
		{name: "port zero", allow: []string{"example.com:0"}, wantErr: "bad port"},
		{name: "port too big", allow: []string{"example.com:65536"}, wantErr: "bad port"},
		{name: "port not a number", allow: []string{"example.com:https"}, wantErr: "bad port"},
		{name: "bad cidr bits", allow: []string{"10.0.0.0/33"}, wantErr: `"10.0.0.0/33"`},
		{name: "bad cidr", allow: []string{"10.0.0/8"}, wantErr: "bad CIDR"},
		{name: "empty label", allow: []string{"a..b"}, wantErr: "label"},
		{name: "bad char", allow: []string{"exa mple.com"}, wantErr: `"exa mple.com"`},
		{name: "leading dash", allow: []string{"-a.com"}, wantErr: "'-'"},
		{name: "names the bad one", allow: []string{"ok.test", "bad!.test"}, wantErr: `"bad!.test"`},
		{name: "ipv6 unbracketed port", allow: []string{"2001:db8::1:443:x"}, wantErr: "2001:db8::1:443:x"},
		{name: "unclosed bracket", allow: []string{"[::1:80"}, wantErr: "[::1:80"},
		{name: "bracketed ipv4", allow: []string{"[10.0.0.1]:80"}, wantErr: "[10.0.0.1]:80"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Parse(tt.allow)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Parse(%q) error = %v, want one containing %q", tt.allow, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse(%q): %v", tt.allow, err)
			}
			if got := p.Entries(); !slices.Equal(got, tt.want) {
				t.Errorf("Entries() = %q, want %q", got, tt.want)
			}
			// Canonical entries parse to themselves.
			again, err := Parse(p.Entries())
			if err != nil || !slices.Equal(again.Entries(), p.Entries()) {
				t.Errorf("reparse %q = %q, %v", p.Entries(), again.Entries(), err)
			}
		})
	}
}

func TestPolicyMatch(t *testing.T) {
	p := MustParse(
		"api.github.com",
		"*.pythonhosted.org:443",
		"db:5432",
		"192.0.2.0/24:5432",
		"198.51.100.7",
		"2001:db8::/32:443",
		"10.1.0.0/16",
	)
	names := []struct {
		name string
		port int
		want bool
	}{
		{"api.github.com", 443, true},
		{"API.GitHub.com.", 22, true},
		{"github.com", 443, false},
		{"x.api.github.com", 443, false},
		{"files.pythonhosted.org", 443, true},
		{"a.b.pythonhosted.org", 443, true},
		{"files.pythonhosted.org", 80, false},
		{"files.pythonhosted.org", 0, true}, // DNS: any port
		{"pythonhosted.org", 443, false},    // *.suffix is below the suffix only
		{"evilpythonhosted.org", 443, false},
		{"db", 5432, true},
		{"db", 5433, false},
		{"", 443, false},
	}
	for _, tt := range names {
		t.Run("name "+tt.name, func(t *testing.T) {
			if got := p.AllowsName(tt.name, tt.port); got != tt.want {
				t.Errorf("AllowsName(%q, %d) = %v, want %v", tt.name, tt.port, got, tt.want)
			}
		})
	}
	addrs := []struct {
		addr string
		port int
		want bool
	}{
		{"192.0.2.9", 5432, true},
		{"192.0.2.9", 443, false},
		{"192.0.3.9", 5432, false},
		{"198.51.100.7", 1, true},
		{"198.51.100.8", 1, false},
		{"::ffff:198.51.100.7", 80, true},
		{"2001:db8:1::5", 443, true},
		{"2001:db8:1::5", 80, false},
		{"2001:db9::5", 443, false},
		{"10.1.2.3", 22, true},
		{"10.2.2.3", 22, false},
	}
	for _, tt := range addrs {
		t.Run("addr "+tt.addr, func(t *testing.T) {
			if got := p.AllowsAddr(netip.MustParseAddr(tt.addr), tt.port); got != tt.want {
				t.Errorf("AllowsAddr(%s, %d) = %v, want %v", tt.addr, tt.port, got, tt.want)
			}
		})
	}
	if (Policy{}).AllowsName("api.github.com", 443) || (Policy{}).AllowsAddr(netip.MustParseAddr("192.0.2.1"), 80) {
		t.Error("the zero Policy allows something")
	}
}

func TestMetadataNeedsExactRule(t *testing.T) {
	tests := []struct {
		allow []string
		addr  string
		port  int
		want  bool
	}{
		{[]string{"0.0.0.0/0"}, "169.254.169.254", 80, false},
		{[]string{"169.254.0.0/16"}, "169.254.169.254", 80, false},
		{[]string{"169.254.169.254"}, "169.254.169.254", 80, true},
		{[]string{"169.254.169.254/32:80"}, "169.254.169.254", 80, true},
		{[]string{"169.254.169.254/32:80"}, "169.254.169.254", 81, false},
		{[]string{"169.254.0.0/16"}, "169.254.169.253", 80, true},
		{[]string{"::/0"}, "fd00:ec2::254", 80, false},
		{[]string{"fd00::/8"}, "fd00:ec2::254", 80, false},
		{[]string{"[fd00:ec2::254]:80"}, "fd00:ec2::254", 80, true},
		{[]string{"0.0.0.0/0"}, "::ffff:169.254.169.254", 80, false},
		{[]string{"100.64.0.0/10"}, "100.100.100.200", 80, false},
	}
	for _, tt := range tests {
		if got := MustParse(tt.allow...).AllowsAddr(netip.MustParseAddr(tt.addr), tt.port); got != tt.want {
			t.Errorf("%q allows %s:%d = %v, want %v", tt.allow, tt.addr, tt.port, got, tt.want)
		}
	}
}

func TestIsSpecial(t *testing.T) {
	tests := []struct {
		addr string
		want bool
	}{
		{"10.0.0.1", true}, {"172.16.5.4", true}, {"172.32.0.1", false}, {"192.168.1.1", true},
		{"127.0.0.1", true}, {"127.9.9.9", true}, {"169.254.169.254", true}, {"100.64.0.1", true},
		{"100.128.0.1", false}, {"0.1.2.3", true}, {"::1", true}, {"fd00::1", true}, {"fe80::1", true},
		{"::ffff:10.0.0.1", true}, {"198.20.0.5", false}, {"8.8.8.8", false}, {"2606:4700::1111", false},
		// Special-purpose ranges: documentation, benchmarking, protocol
		// assignments, and IPv6 that carries or translates IPv4.
		{"192.0.2.1", true}, {"198.51.100.7", true}, {"203.0.113.5", true}, {"2001:db8::1", true},
		{"198.18.0.1", true}, {"198.19.255.255", true}, {"198.20.0.1", false}, {"192.0.0.8", true},
		{"192.88.99.1", true}, {"255.255.255.255", true},
		{"64:ff9b::7f00:1", true}, {"64:ff9b::a00:1", true}, {"64:ff9b:1::1", true},
		{"2002:7f00:1::1", true}, {"2001:0:4136:e378::1", true}, {"::127.0.0.1", true}, {"::", true},
		{"100::1", true}, {"fec0::1", true}, {"fd00:ec2::254", true},
	}
	for _, tt := range tests {
		if got := IsSpecial(netip.MustParseAddr(tt.addr)); got != tt.want {
			t.Errorf("IsSpecial(%s) = %v, want %v", tt.addr, got, tt.want)
		}
	}
}
