package sources

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"

	"github.com/cove-dev/cove/api"
)

// GitSpec is a clone to make.
type GitSpec struct {
	URL   string // http(s), without credentials
	Ref   string // a branch, tag or full commit; "" for the remote's HEAD
	Depth int    // 0 for the whole history
	// Token, when set, is sent as HTTP basic credentials (user
	// x-access-token) through git's configuration in the environment of
	// git alone: never on a command line, never in .git/config.
	Token string
	// Dir is an empty directory the clone goes into.
	Dir string
	// Command makes each git command (to run it as another user, in
	// another network namespace); nil runs git as it is.
	Command func(ctx context.Context, args []string) *exec.Cmd
}

var hexRE = regexp.MustCompile(`^[0-9a-f]{40}([0-9a-f]{24})?$`)

// Clone clones spec.URL at spec.Ref into spec.Dir and returns the commit
// checked out. Failures are coded errors whose message says which: the
// credentials, the ref, the repository, or git's own last words (with the
// directory's path taken out).
func Clone(ctx context.Context, spec GitSpec) (commit string, err error) {
	g := &gitRun{spec: spec}
	depth := []string{}
	if spec.Depth > 0 {
		depth = []string{"--depth", strconv.Itoa(spec.Depth)}
	}
	if spec.Ref == "" || !hexRE.MatchString(spec.Ref) {
		args := append([]string{"clone", "--no-recurse-submodules"}, depth...)
		if spec.Ref != "" {
			args = append(args, "--branch", spec.Ref)
		}
		if err := g.run(ctx, append(args, "--", spec.URL, spec.Dir)...); err != nil {
			return "", err
		}
	} else {
		// A commit: fetch it alone (servers allow wants of reachable
		// commits with protocol v2), else the whole history.
		if err := g.run(ctx, "init", "-q", spec.Dir); err != nil {
			return "", err
		}
		if err := g.run(ctx, "-C", spec.Dir, "remote", "add", "origin", spec.URL); err != nil {
			return "", err
		}
		ferr := g.run(ctx, append(append([]string{"-C", spec.Dir, "fetch", "-q"}, depth...), "origin", spec.Ref)...)
		if ferr != nil {
			if isCredentials(ferr) {
				return "", ferr
			}
			if err := g.run(ctx, "-C", spec.Dir, "fetch", "-q", "--tags", "origin", "+refs/heads/*:refs/remotes/origin/*"); err != nil {
				return "", err
			}
			if err := g.run(ctx, "-C", spec.Dir, "checkout", "-q", "--detach", spec.Ref); err != nil {
				return "", g.refNotFound()
			}
		} else if err := g.run(ctx, "-C", spec.Dir, "checkout", "-q", "--detach", "FETCH_HEAD"); err != nil {
			return "", err
		}
	}
	out, err := g.output(ctx, "-C", spec.Dir, "rev-parse", "HEAD")
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(out), nil
}

type gitRun struct {
	spec GitSpec
}

func isCredentials(err error) bool {
	e, ok := err.(*api.Error)
	return ok && e.Details["reason"] == "credentials"
}

func (g *gitRun) refNotFound() error {
	return &api.Error{Code: api.CodeUnprocessable, Message: fmt.Sprintf("git ref %q was not found in %s", g.spec.Ref, g.spec.URL),
		Details: map[string]any{"reason": "ref"}}
}

// noRoom is a clone that ran out of the room its caller gave it (disk, or
// the size of one file); the caller, which set the room, says how much.
func (g *gitRun) noRoom() error {
	return &api.Error{Code: api.CodeUnprocessable, Message: fmt.Sprintf("the clone of %s ran out of room", g.spec.URL),
		Details: map[string]any{"reason": "space"}}
}

// env is git's environment: no system or global configuration, no
// prompts, only http(s), and the token as an extra header.
func (g *gitRun) env() []string {
	env := []string{
		"PATH=/usr/local/bin:/usr/bin:/bin",
		"HOME=/nonexistent",
		"LANG=C", "LC_ALL=C",
		"GIT_TERMINAL_PROMPT=0",
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_ALLOW_PROTOCOL=http:https",
		"GIT_PROTOCOL_FROM_USER=0",
	}
	n := 0
	add := func(k, v string) {
		env = append(env, fmt.Sprintf("GIT_CONFIG_KEY_%d=%s", n, k), fmt.Sprintf("GIT_CONFIG_VALUE_%d=%s", n, v))
		n++
	}
	add("core.hooksPath", "/dev/null")
	add("protocol.version", "2")
	add("advice.detachedHead", "false")
	if g.spec.Token != "" {
		cred := base64.StdEncoding.EncodeToString([]byte("x-access-token:" + g.spec.Token))
		add("http.extraHeader", "Authorization: Basic "+cred)
	}
	return append(env, "GIT_CONFIG_COUNT="+strconv.Itoa(n))
}

func (g *gitRun) cmd(ctx context.Context, args []string) *exec.Cmd {
	var c *exec.Cmd
	if g.spec.Command != nil {
		c = g.spec.Command(ctx, append([]string{"git"}, args...))
	} else {
		c = exec.CommandContext(ctx, "git", args...)
	}
	c.Env = g.env()
	c.Stdin = nil
	return c
}

func (g *gitRun) output(ctx context.Context, args ...string) (string, error) {
	c := g.cmd(ctx, args)
	var stderr bytes.Buffer
	c.Stderr = &limited{b: &stderr, n: 64 << 10}
	out, err := c.Output()
	if err != nil {
		return "", g.classify(ctx, stderr.String(), err)
	}
	return string(out), nil
}

func (g *gitRun) run(ctx context.Context, args ...string) error {
	_, err := g.output(ctx, args...)
	return err
}

// classify turns git's failure into an error that says which.
func (g *gitRun) classify(ctx context.Context, stderr string, err error) error {
	if ctx.Err() != nil {
		return api.Errorf(api.CodeUnavailable, "the clone of %s did not finish in time", g.spec.URL)
	}
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		// A file past the caller's RLIMIT_FSIZE: git is killed by SIGXFSZ.
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGXFSZ {
			return g.noRoom()
		}
	}
	low := strings.ToLower(stderr)
	switch {
	case strings.Contains(low, "authentication failed"), strings.Contains(low, "error: 401"),
		strings.Contains(low, "error: 403"), strings.Contains(low, "could not read username"),
		strings.Contains(low, "could not read password"):
		what := "needs credentials: name a secret in source.auth_secret"
		if g.spec.Token != "" {
			what = "refused the credentials: check the secret named by source.auth_secret"
		}
		return &api.Error{Code: api.CodeUnprocessable, Message: fmt.Sprintf("the git server of %s %s", g.spec.URL, what),
			Details: map[string]any{"reason": "credentials"}}
	case strings.Contains(low, "remote branch") && strings.Contains(low, "not found"),
		strings.Contains(low, "couldn't find remote ref"), strings.Contains(low, "not our ref"),
		strings.Contains(low, "did not match any"), strings.Contains(low, "unknown revision"):
		return g.refNotFound()
	case strings.Contains(low, "no space left on device"), strings.Contains(low, "disk quota exceeded"),
		strings.Contains(low, "file too large"), strings.Contains(low, "died of signal 25"):
		return g.noRoom()
	case strings.Contains(low, "repository") && strings.Contains(low, "not found"), strings.Contains(low, "error: 404"):
		return &api.Error{Code: api.CodeUnprocessable, Message: fmt.Sprintf("no git repository at %s (or it needs credentials)", g.spec.URL),
			Details: map[string]any{"reason": "repository"}}
	}
	last := ""
	for _, l := range strings.Split(strings.TrimSpace(stderr), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			last = l
		}
	}
	last = strings.ReplaceAll(last, g.spec.Dir, "<workdir>")
	if last == "" {
		last = err.Error()
	}
	if len(last) > 300 {
		last = last[:300]
	}
	return &api.Error{Code: api.CodeUnprocessable, Message: fmt.Sprintf("git could not clone %s: %s", g.spec.URL, last),
		Details: map[string]any{"reason": "git"}}
}

// limited keeps the first n bytes written to it.
type limited struct {
	b *bytes.Buffer
	n int
}

func (l *limited) Write(p []byte) (int, error) {
	if room := l.n - l.b.Len(); room > 0 {
		l.b.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}
