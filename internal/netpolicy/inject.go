package netpolicy

import (
	"fmt"
	"net/netip"
	"net/textproto"
	"regexp"
	"slices"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// InjectRule adds a header to the HTTPS requests a sandbox sends to one
// destination: the gateway terminates the sandbox's TLS to Host (with a
// leaf of the sandbox's own CA), sets Header to Value with each
// {secret:NAME} replaced by that team secret's value, and sends the
// request on over its own verified TLS connection. A rule does not allow
// its destination: the policy's allow list still decides.
type InjectRule struct {
	// Host is an exact DNS name (no wildcard, no address).
	Host string
	// Port is the destination port; 0 means 443.
	Port int
	// PathPrefix, if set, limits the rule to request paths beginning
	// with it.
	PathPrefix string
	// Header is the header set; one of that name the sandbox sent is
	// replaced.
	Header string
	// Value is the header's value, naming secrets as {secret:NAME}.
	Value string
}

// MaxInjectRules bounds the rules of a policy.
const MaxInjectRules = 64

// secretRef is {secret:NAME}; NAME is a team secret's name.
var secretRef = regexp.MustCompile(`\{secret:([^{}]*)\}`)

var secretName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// forbiddenHeaders are headers a rule may not set: they frame the request
// or name its destination, and setting them would let a rule smuggle or
// redirect requests.
var forbiddenHeaders = map[string]bool{
	"Host": true, "Connection": true, "Content-Length": true, "Transfer-Encoding": true, "Te": true,
	"Trailer": true, "Upgrade": true, "Keep-Alive": true, "Proxy-Connection": true, "Expect": true,
}

// SecretNames returns the secret names Value refers to, in order, each
// once.
func (r InjectRule) SecretNames() []string {
	var out []string
	for _, m := range secretRef.FindAllStringSubmatch(r.Value, -1) {
		if !slices.Contains(out, m[1]) {
			out = append(out, m[1])
		}
	}
	return out
}

// port is the rule's port, 443 by default.
func (r InjectRule) port() int {
	if r.Port == 0 {
		return 443
	}
	return r.Port
}

// CheckInject validates injection rules and returns them in canonical
// form (host lower case without a trailing dot, header canonical). The
// error names the first bad rule by its index.
func CheckInject(rules []InjectRule) ([]InjectRule, error) {
	if len(rules) > MaxInjectRules {
		return nil, fmt.Errorf("%d injection rules; at most %d are allowed", len(rules), MaxInjectRules)
	}
	out := make([]InjectRule, 0, len(rules))
	for i, r := range rules {
		c, err := checkRule(r)
		if err != nil {
			return nil, fmt.Errorf("inject[%d]: %w", i, err)
		}
		out = append(out, c)
	}
	return out, nil
}

func checkRule(r InjectRule) (InjectRule, error) {
	host := normName(strings.TrimSpace(r.Host))
	switch {
	case host == "":
		return r, fmt.Errorf("host is required")
	case strings.HasPrefix(host, "*."):
		return r, fmt.Errorf("host %q: a rule names one host exactly, not a wildcard", r.Host)
	case strings.ContainsAny(host, ":/[]"):
		return r, fmt.Errorf("host %q: give a DNS name alone, the port in port", r.Host)
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return r, fmt.Errorf("host %q: a rule names a DNS name, not an address (TLS server names are names)", r.Host)
	}
	if err := validName(host); err != nil {
		return r, fmt.Errorf("host %q: %w", r.Host, err)
	}
	if !strings.Contains(host, ".") {
		return r, fmt.Errorf("host %q: a rule names a fully qualified DNS name", r.Host)
	}
	r.Host = host
	if r.Port < 0 || r.Port > 65535 {
		return r, fmt.Errorf("port %d: want 1-65535", r.Port)
	}
	if r.PathPrefix != "" && (!strings.HasPrefix(r.PathPrefix, "/") || strings.ContainsAny(r.PathPrefix, "?# \t\r\n")) {
		return r, fmt.Errorf("path_prefix %q: want a path beginning with /, without query or fragment", r.PathPrefix)
	}
	if !httpguts.ValidHeaderFieldName(r.Header) {
		return r, fmt.Errorf("header %q is not a valid header name", r.Header)
	}
	r.Header = textproto.CanonicalMIMEHeaderKey(r.Header)
	if forbiddenHeaders[r.Header] || strings.HasPrefix(r.Header, "Proxy-") {
		return r, fmt.Errorf("header %s frames or routes the request; a rule cannot set it", r.Header)
	}
	if !httpguts.ValidHeaderFieldValue(r.Value) {
		return r, fmt.Errorf("value holds characters a header cannot")
	}
	names := secretRef.FindAllStringSubmatch(r.Value, -1)
	if len(names) == 0 {
		return r, fmt.Errorf("value names no secret; write {secret:NAME} where the secret's value goes")
	}
	for _, m := range names {
		if !secretName.MatchString(m[1]) {
			return r, fmt.Errorf("value: secret name %q is invalid", m[1])
		}
	}
	if rest := secretRef.ReplaceAllString(r.Value, ""); strings.Contains(rest, "{secret:") {
		return r, fmt.Errorf("value: a {secret: without its closing }")
	}
	return r, nil
}

// Injection is what the gateway needs to inject for one sandbox: its
// rules, the values of the secrets they name and the placeholders the
// sandbox holds for them. It is kept in memory only.
type Injection struct {
	Rules []InjectRule
	// Secrets are the values by secret name.
	Secrets map[string]string
	// Placeholders are the placeholders by secret name: a placeholder in a
	// request to a destination whose rule names that secret is replaced
	// with its value.
	Placeholders map[string]string
}

// covers reports whether a rule names host at port.
func (in *Injection) covers(host string, port int) bool {
	if in == nil {
		return false
	}
	host = normName(host)
	for _, r := range in.Rules {
		if r.Host == host && r.port() == port {
			return true
		}
	}
	return false
}

// matching returns the indexes of the rules for a request to host:port
// with path.
func (in *Injection) matching(host string, port int, path string) []int {
	var out []int
	host = normName(host)
	for i, r := range in.Rules {
		if r.Host == host && r.port() == port && strings.HasPrefix(path, r.PathPrefix) {
			out = append(out, i)
		}
	}
	return out
}

// errMissingSecret says a rule names a secret whose value the gateway was
// not given.
type errMissingSecret string

func (e errMissingSecret) Error() string {
	return fmt.Sprintf("secret %s is not available to the network gateway (the team has no such secret: it was deleted)", string(e))
}

// expand returns a rule's value with its secrets.
func (in *Injection) expand(r InjectRule) (string, error) {
	var err error
	v := secretRef.ReplaceAllStringFunc(r.Value, func(m string) string {
		name := secretRef.FindStringSubmatch(m)[1]
		s, ok := in.Secrets[name]
		if !ok && err == nil {
			err = errMissingSecret(name)
		}
		return s
	})
	if err != nil {
		return "", err
	}
	if !httpguts.ValidHeaderFieldValue(v) {
		return "", fmt.Errorf("the value of header %s holds characters a header cannot (a secret with a line break?)", r.Header)
	}
	return v, nil
}
