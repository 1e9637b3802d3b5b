package runs_test

import (
	"testing"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/runs"
)

// TestCheckProvision: a setup without timeout_s gets the default; a setup
// or a git source naming a secret is refused (422) when secrets are not
// configured and passes when they are; a digest given by the client and an
// unknown source type are refused (400).
func TestCheckProvision(t *testing.T) {
	git := &api.Source{Type: api.SourceGit, URL: "https://example.com/r.git", AuthSecret: "tok"}
	for _, tc := range []struct {
		name    string
		req     api.CreateSandboxRequest
		secrets bool
		code    api.Code
	}{
		{"default timeout", api.CreateSandboxRequest{Setup: &api.Setup{Command: "make"}}, false, ""},
		{"setup secrets unconfigured", api.CreateSandboxRequest{Setup: &api.Setup{Command: "make", Secrets: map[string]string{"T": "tok"}}}, false, api.CodeUnprocessable},
		{"setup secrets configured", api.CreateSandboxRequest{Setup: &api.Setup{Command: "make", Secrets: map[string]string{"T": "tok"}}}, true, ""},
		{"git secret unconfigured", api.CreateSandboxRequest{Source: git}, false, api.CodeUnprocessable},
		{"git secret configured", api.CreateSandboxRequest{Source: git}, true, ""},
		{"digest", api.CreateSandboxRequest{Source: &api.Source{Type: api.SourceUpload, Digest: "abc"}}, false, api.CodeInvalidArgument},
		{"unknown type", api.CreateSandboxRequest{Source: &api.Source{Type: "ftp"}}, false, api.CodeInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := runs.CheckProvision(tc.req, tc.secrets)
			if got := api.ErrorCode(err); got != tc.code {
				t.Fatalf("code %q (%v), want %q", got, err, tc.code)
			}
			if err == nil && p.Setup != nil && p.Setup.TimeoutS != runs.DefaultSetupTimeoutS {
				t.Errorf("setup timeout %d, want %d", p.Setup.TimeoutS, runs.DefaultSetupTimeoutS)
			}
		})
	}
}
