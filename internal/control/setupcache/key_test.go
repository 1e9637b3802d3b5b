package setupcache_test

import (
	"testing"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/setupcache"
)

// TestKey: the key is what made the setup: the command, the template, the
// disk and the source's digest change it; the name of the secret a git
// source authenticates with does not (it is not what was cloned).
func TestKey(t *testing.T) {
	base := func() api.Sandbox {
		return api.Sandbox{
			Template: "managed", Resources: api.Resources{DiskMiB: 1024}, Workdir: "/home/user",
			Provision: api.Provision{
				Source: &api.Source{Type: api.SourceGit, URL: "https://example.com/r.git", Digest: "abc", AuthSecret: "tok"},
				Setup:  &api.Setup{Command: "make", Env: map[string]string{"A": "1"}},
			},
		}
	}
	k := setupcache.Key(base())
	same := base()
	same.Source.AuthSecret = "other-token"
	if setupcache.Key(same) != k {
		t.Error("the auth secret's name changed the key")
	}
	for name, change := range map[string]func(*api.Sandbox){
		"command":  func(sb *api.Sandbox) { sb.Setup.Command = "make all" },
		"template": func(sb *api.Sandbox) { sb.Template = "other" },
		"disk":     func(sb *api.Sandbox) { sb.Resources.DiskMiB = 2048 },
		"digest":   func(sb *api.Sandbox) { sb.Source.Digest = "def" },
		"env":      func(sb *api.Sandbox) { sb.Setup.Env["A"] = "2" },
	} {
		sb := base()
		change(&sb)
		if setupcache.Key(sb) == k {
			t.Errorf("a changed %s kept the key", name)
		}
	}
}
