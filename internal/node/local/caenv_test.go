package local

import (
	"log/slog"
	"slices"
	"testing"

	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/node/image"
)

// TestCAEnv: commands in sandboxes of a template with the operator's CA
// bundle get the variables that point tools at it, unless they set their
// own; other templates get none.
func TestCAEnv(t *testing.T) {
	n := New(Config{
		Templates: map[string]image.Image{"managed": {Name: "managed", Shell: []string{"/bin/sh", "-c"}}, "plain": {Name: "plain", Shell: []string{"/bin/sh", "-c"}}},
		CABundles: map[string]string{"managed": "/data/ca/managed.crt"},
	}, nil, slog.New(slog.DiscardHandler), nil)
	defer n.Close()
	for _, tt := range []struct {
		template string
		env      map[string]string
		want     []string
		absent   []string
	}{
		{"managed", nil, []string{
			"SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt", "NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt",
			"REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt", "PIP_CERT=/etc/ssl/certs/ca-certificates.crt",
			"GIT_SSL_CAINFO=/etc/ssl/certs/ca-certificates.crt",
		}, nil},
		{"managed", map[string]string{"PIP_CERT": "/mine.pem"}, []string{"PIP_CERT=/mine.pem", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"},
			[]string{"PIP_CERT=/etc/ssl/certs/ca-certificates.crt"}},
		{"plain", nil, nil, []string{"SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"}},
	} {
		req, err := n.execRequest(node.ExecSpec{ID: "cmd_1", Template: tt.template, Shell: "true", Env: tt.env}, false)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range tt.want {
			if !slices.Contains(req.Env, w) {
				t.Errorf("%s %v: env %q lacks %s", tt.template, tt.env, req.Env, w)
			}
		}
		for _, a := range tt.absent {
			if slices.Contains(req.Env, a) {
				t.Errorf("%s %v: env %q has %s", tt.template, tt.env, req.Env, a)
			}
		}
	}
}
