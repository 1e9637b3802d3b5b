// Package gitsource checks and clones the git sources of sandboxes and
// workloads: the node clones apart from the sandbox, as IDs held for the
// clone alone, with the token (a team's secret) given to the node only.
package gitsource

import (
	"context"
	"fmt"
	"net/netip"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/id"
	"github.com/cove-dev/cove/internal/node"
)

// Node clones a repository into a started sandbox.
type Node interface {
	CloneGit(ctx context.Context, sandboxID string, spec node.GitSpec) (string, error)
}

// Ranges hold host ID ranges (control/idranges).
type Ranges interface {
	Alloc(ctx context.Context, id string) (node.IDRange, error)
	Release(ctx context.Context, id string)
}

// Secrets resolve a team's secrets by name.
type Secrets interface {
	ResolveSecrets(ctx context.Context, teamID string, names map[string]string) (map[string]string, error)
}

// Cloner clones git sources.
type Cloner struct {
	Node   Node
	Ranges Ranges
	// Secrets is nil when secrets are not configured.
	Secrets Secrets
}

func invalid(format string, args ...any) error {
	return api.Errorf(api.CodeInvalidArgument, format, args...)
}

// Clone clones a git source into a folder of a started sandbox (or
// workload), owned by owner (the template's default user), and returns
// the commit checked out.
func (c *Cloner) Clone(ctx context.Context, teamID, targetID, dir string, src api.Source, owner node.User) (string, error) {
	token := ""
	if src.AuthSecret != "" {
		if c.Secrets == nil {
			return "", api.Errorf(api.CodeUnprocessable, "source.auth_secret names a secret, but secrets are not configured on this server")
		}
		vals, err := c.Secrets.ResolveSecrets(ctx, teamID, map[string]string{"token": src.AuthSecret})
		if err != nil {
			return "", err
		}
		token = vals["token"]
	}
	ctx, cancel := context.WithTimeout(ctx, gitTimeout)
	defer cancel()
	// git runs as IDs held for this clone alone (released after it; a
	// range left by a crash is freed at Recover, as it names no sandbox).
	cloneID := id.New("clone")
	ids, err := c.Ranges.Alloc(ctx, cloneID)
	if err != nil {
		return "", err
	}
	defer c.Ranges.Release(context.WithoutCancel(ctx), cloneID)
	return c.Node.CloneGit(ctx, targetID, node.GitSpec{
		URL: src.URL, Ref: src.Ref, Depth: src.Depth, Token: token, IDs: ids,
		Path: dir, UID: owner.UID, GID: owner.GID,
	})
}

const gitTimeout = 30 * time.Minute

var gitRefRE = regexp.MustCompile(`^[A-Za-z0-9._/@+-]{1,255}$`)

const maxGitDepth = 1 << 20

// Check validates a git source: an http(s) URL without
// credentials (a token goes in a secret, named by auth_secret), a ref that
// cannot be taken for an option, a depth in range.
func Check(src api.Source) (api.Source, error) {
	if src.AssetID != "" {
		return src, invalid("source type git takes no asset_id")
	}
	if src.URL == "" {
		return src, invalid("source type git needs url (https://host/owner/repo.git)")
	}
	u, err := url.Parse(src.URL)
	switch {
	case err != nil || len(src.URL) > 2048 || strings.ContainsRune(src.URL, 0):
		return src, invalid("source.url is not a valid URL")
	case u.Scheme != "https" && u.Scheme != "http":
		return src, invalid("source.url scheme %q is not supported; use https:// (or http://)", u.Scheme)
	case u.User != nil:
		return src, invalid("source.url carries credentials; put the token in a secret and name it in source.auth_secret")
	case u.Hostname() == "":
		return src, invalid("source.url has no host")
	case isIPLiteral(u.Hostname()):
		// An address would become an address rule of the clone's policy,
		// which reaches private ranges a name never does.
		return src, invalid("source.url names an address; name the repository's host instead")
	case u.RawQuery != "" || u.Fragment != "":
		return src, invalid("source.url may not have a query or fragment")
	}
	if src.Ref != "" && (!gitRefRE.MatchString(src.Ref) || strings.HasPrefix(src.Ref, "-") || strings.Contains(src.Ref, "..")) {
		return src, invalid("source.ref %q is not a branch, tag or commit name", src.Ref)
	}
	if src.Depth < 0 || src.Depth > maxGitDepth {
		return src, &api.Error{
			Code:    api.CodeInvalidArgument,
			Message: fmt.Sprintf("source.depth is %d; it must be between 0 and %d", src.Depth, maxGitDepth),
			Details: map[string]any{"field": "source.depth", "min": "0", "max": fmt.Sprint(maxGitDepth)},
		}
	}
	src.URL = u.String()
	return src, nil
}

func isIPLiteral(host string) bool {
	_, err := netip.ParseAddr(strings.Trim(host, "[]"))
	return err == nil
}
