package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/cove-dev/cove/api"
	cove "github.com/cove-dev/cove/sdk/go"
)

// A command that creates a named thing meets one that exists (the server
// answers 409): it does what the user meant when the thing is what was
// asked for (it prints it), and otherwise says what is there and the next
// step, never only "already exists".

// existingPreview is `cove preview REF PORT` on a port that has a preview:
// when the flags the user set agree with it, its URL (exit 0); else what
// differs and how to change it. asked names the flags set on the command
// line (public, wake).
func (a *app) existingPreview(ctx context.Context, cl *cove.Client, ref string, req api.CreatePreviewRequest, asked map[string]bool, created error) error {
	ps, err := cl.Previews(ctx, ref)
	if err != nil {
		return created
	}
	i := slices.IndexFunc(ps, func(p api.Preview) bool { return p.Port == req.Port })
	if i < 0 {
		return created // the conflict was not this port's preview
	}
	p := ps[i]
	var differs []string
	if asked["public"] && p.Visibility != req.Visibility {
		differs = append(differs, fmt.Sprintf("it is %s, you asked for %s", p.Visibility, req.Visibility))
	}
	if asked["wake"] && p.Wake != req.Wake {
		differs = append(differs, fmt.Sprintf("it has wake %t, you asked for wake %t", p.Wake, req.Wake))
	}
	if len(differs) > 0 {
		return fmt.Errorf("port %d of %s already has preview %s, and %s; to change it, remove it and publish again: cove preview %s --rm %s && cove preview %s",
			p.Port, ref, p.ID, strings.Join(differs, "; "), ref, p.ID, strings.Join(previewArgs(ref, req), " "))
	}
	if a.json {
		return a.printJSON(p)
	}
	fmt.Fprintln(a.env.Stdout, p.URL)
	if p.Visibility == api.VisibilityPrivate {
		fmt.Fprintf(a.env.Stderr, "private preview %s exists already; its token was shown when it was created (for a new one: cove preview %s --rm %s && cove preview %s)\n",
			p.ID, ref, p.ID, strings.Join(previewArgs(ref, req), " "))
	}
	return nil
}

// previewArgs are the arguments of `cove preview` that ask for req.
func previewArgs(ref string, req api.CreatePreviewRequest) []string {
	args := []string{ref, fmt.Sprint(req.Port)}
	if req.Visibility == api.VisibilityPublic {
		args = append(args, "--public")
	}
	if req.Wake {
		args = append(args, "--wake")
	}
	return args
}

// sandboxNameTaken explains a create refused because the name is a live
// sandbox's.
func sandboxNameTaken(ctx context.Context, cl *cove.Client, name string, created error) error {
	if name == "" || api.ErrorCode(created) != api.CodeConflict {
		return created
	}
	sb, err := cl.GetSandbox(ctx, name)
	if err != nil {
		return created
	}
	return fmt.Errorf("a sandbox named %s already exists (%s, %s): use it by its name (cove exec %s -- COMMAND), remove it first (cove rm %s), or choose another --name",
		name, sb.ID, sb.State, name, name)
}

// teamNameTaken explains a team create refused because the name is taken.
func teamNameTaken(ctx context.Context, cl *cove.Client, name string, created error) error {
	if api.ErrorCode(created) != api.CodeConflict {
		return created
	}
	teams, err := cl.ListTeams(ctx)
	if err != nil {
		return created
	}
	for _, t := range teams {
		if t.Name == name {
			return fmt.Errorf("a team named %s already exists (%s): for another API key of it: cove teams key %s; or choose another name", name, t.ID, t.ID)
		}
	}
	return created
}

// imageNameTaken explains an import refused because the name is taken.
func imageNameTaken(ctx context.Context, cl *cove.Client, name string, created error) error {
	if api.ErrorCode(created) != api.CodeConflict {
		return created
	}
	img, err := cl.GetImage(ctx, name)
	if err != nil {
		return created // the name may be a template's: the server said so
	}
	return fmt.Errorf("an image called %s already exists (%s): change its settings with cove images update %s, remove it first (cove images rm %s), or choose another --name",
		name, img.ID, name, name)
}

// existingWebhook finds a webhook of the team that already sends to url:
// adding a second would deliver every event twice.
func existingWebhook(ctx context.Context, cl *cove.Client, url string) (api.Webhook, bool, error) {
	cursor := ""
	for {
		l, err := cl.ListWebhooks(ctx, 0, cursor)
		if err != nil {
			return api.Webhook{}, false, err
		}
		for _, w := range l.Items {
			if w.URL == url {
				return w, true, nil
			}
		}
		if l.NextCursor == "" {
			return api.Webhook{}, false, nil
		}
		cursor = l.NextCursor
	}
}

// sameEvents says two webhook event lists select the same events (an
// empty list is all of them).
func sameEvents(a, b []string) bool {
	norm := func(s []string) []string {
		if len(s) == 0 {
			return []string{"*"}
		}
		s = slices.Clone(s)
		slices.Sort(s)
		return slices.Compact(s)
	}
	return slices.Equal(norm(a), norm(b))
}

// existingWebhookFound is `cove webhooks add URL` for a URL that has a
// webhook: with the same events, it is printed (exit 0); with others,
// what differs and how to change it.
func (a *app) existingWebhookFound(w api.Webhook, events []string) error {
	again := "cove webhooks add " + w.URL
	for _, e := range events {
		again += " --event " + e
	}
	if !sameEvents(w.Events, events) {
		asked := "*"
		if len(events) > 0 {
			asked = strings.Join(events, ",")
		}
		return fmt.Errorf("webhook %s already sends events %s to %s, you asked for %s; to change it: cove webhooks rm %s && %s",
			w.ID, strings.Join(w.Events, ","), w.URL, asked, w.ID, again)
	}
	if a.json {
		return a.printJSON(api.CreateWebhookResponse{Webhook: w}) // no secret: shown once
	}
	fmt.Fprintf(a.env.Stdout, "webhook %s → %s (events: %s)\n", w.ID, w.URL, strings.Join(w.Events, ","))
	fmt.Fprintf(a.env.Stderr, "webhook %s exists already; its signing secret was shown when it was added (for a new one: cove webhooks rm %s && %s)\n", w.ID, w.ID, again)
	return nil
}
