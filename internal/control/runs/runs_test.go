package runs

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/node"
)

// refuser fails the check named refuse and records the checks it ran.
type refuser struct {
	refuse string
	ran    []string
}

func (r *refuser) check(name string) error {
	r.ran = append(r.ran, name)
	if name == r.refuse {
		return errors.New(name + " refused")
	}
	return nil
}

func (r *refuser) AdmitTemplate(context.Context, string, string) error { return r.check("admit") }
func (r *refuser) AdmitGPUs(context.Context, string) error             { return r.check("gpu") }
func (r *refuser) TemplateReady(string) error                          { return r.check("ready") }
func (r *refuser) CheckLimits(*api.Image, api.Resources) error         { return r.check("limits") }
func (r *refuser) CheckRefs(field string, _, _ map[string]string) error {
	return r.check("refs:" + field)
}
func (r *refuser) Resolve(_ context.Context, _ string, names map[string]string) (map[string]string, error) {
	if _, ok := names["token"]; ok {
		return nil, r.check("token")
	}
	return nil, r.check("resolve")
}
func (r *refuser) CheckSource(context.Context, string, *api.Source) error { return r.check("source") }
func (r *refuser) TeamRefusal(context.Context, string) error              { return r.check("budget") }
func (r *refuser) SandboxRefusal(context.Context, api.Sandbox) error      { return r.check("budget") }

func checker(r *refuser) Checker {
	return Checker{Admission: r, Images: r, Secrets: r, Sources: r, Budgets: r}
}

// TestCheckerRunsEveryCheck: a workload with GPUs, secrets and a git
// source passes every check, and any one refusal is the answer.
func TestCheckerRunsEveryCheck(t *testing.T) {
	sp := Spec{
		Kind: Workload, TeamID: "team", Template: "managed", Argv: []string{"true"}, GPUs: 1,
		Secrets: map[string]string{"TOKEN": "gh"},
		Source:  &api.Source{Type: api.SourceGit, URL: "https://example.com/r.git", AuthSecret: "gh"},
	}
	all := &refuser{}
	if err := checker(all).Check(t.Context(), sp); err != nil {
		t.Fatal(err)
	}
	want := "limits admit gpu ready refs:secrets resolve budget source token"
	if got := strings.Join(all.ran, " "); got != want {
		t.Fatalf("checks ran: %s\nwant: %s", got, want)
	}
	for _, name := range all.ran {
		t.Run(name, func(t *testing.T) {
			r := &refuser{refuse: name}
			err := checker(r).Check(t.Context(), sp)
			if err == nil || err.Error() != name+" refused" {
				t.Fatalf("Check = %v, want %s refused", err, name)
			}
		})
	}
}

// TestCheckerSetupSecrets: a sandbox's setup secrets are checked with it.
func TestCheckerSetupSecrets(t *testing.T) {
	sp := Spec{Kind: Sandbox, TeamID: "team", Template: "managed",
		Setup: &Spec{Kind: Setup, Command: "make", Secrets: map[string]string{"K": "s"}}}
	r := &refuser{refuse: "refs:setup.secrets"}
	if err := checker(r).Check(t.Context(), sp); err == nil {
		t.Fatalf("a setup's secrets were not checked: ran %v", r.ran)
	}
}

func TestValidate(t *testing.T) {
	noShell := &api.Image{Name: "distroless"}
	for _, tc := range []struct {
		name string
		sp   Spec
		bad  string // "" when valid
	}{
		{"sandbox", Spec{Kind: Sandbox}, ""},
		{"sandbox with a program", Spec{Kind: Sandbox, Command: "ls"}, "runs no program"},
		{"workload without program", Spec{Kind: Workload}, "give command"},
		{"both", Spec{Kind: Workload, Command: "ls", Argv: []string{"ls"}}, "not both"},
		{"empty argv0", Spec{Kind: Workload, Argv: []string{""}}, "argv[0]"},
		{"unknown user", Spec{Kind: Workload, Command: "ls", User: "bob"}, "user \"bob\""},
		{"timeout", Spec{Kind: Workload, Command: "ls", TimeoutS: -1}, "timeout_s"},
		{"shell in image without one", Spec{Kind: Workload, Command: "ls", Image: noShell}, "no shell"},
		{"argv in image without shell", Spec{Kind: Workload, Argv: []string{"/app"}, Image: noShell}, ""},
		{"gpus", Spec{Kind: Workload, Command: "ls", GPUs: MaxGPUs + 1}, "resources.gpus"},
		{"gpu type without gpus", Spec{Kind: Workload, Command: "ls", GPUType: "h100"}, "gpu_type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.sp.Validate()
			switch {
			case tc.bad == "" && err != nil:
				t.Fatalf("Validate = %v, want nil", err)
			case tc.bad != "" && (err == nil || !strings.Contains(err.Error(), tc.bad)):
				t.Fatalf("Validate = %v, want an error with %q", err, tc.bad)
			}
		})
	}
}

// TestExits: a run's exits go to its receiver while it is registered,
// then to the fallback; an old registration's unregister leaves a new
// one in place.
func TestExits(t *testing.T) {
	var fell []string
	x := NewExits(func(run, cmd string, _ node.Exit, _ bool) { fell = append(fell, run+"/"+cmd) })
	var got []string
	recv := func(tag string) Receiver {
		return ReceiverFunc(func(cmd string, e node.Exit, lost bool) { got = append(got, tag+"/"+cmd) })
	}
	un1 := x.Register("wl1", recv("a"))
	x.Deliver("wl1", "c1", node.Exit{}, false)
	x.Deliver("sbx1", "c2", node.Exit{}, false)
	un2 := x.Register("wl1", recv("b"))
	un1()
	x.Deliver("wl1", "c3", node.Exit{}, false)
	un2()
	x.Deliver("wl1", "c4", node.Exit{}, false)
	if g, w := strings.Join(got, " "), "a/c1 b/c3"; g != w {
		t.Errorf("received %q, want %q", g, w)
	}
	if g, w := strings.Join(fell, " "), "sbx1/c2 wl1/c4"; g != w {
		t.Errorf("fallback got %q, want %q", g, w)
	}
}

// budgets answers which limit a run was checked against.
type budgets struct{}

func (budgets) TeamRefusal(context.Context, string) error {
	return api.Errorf(api.CodeBudgetExceeded, "team")
}

func (budgets) SandboxRefusal(context.Context, api.Sandbox) error {
	return api.Errorf(api.CodeBudgetExceeded, "sandbox")
}

// TestBudget: a run in a living sandbox (a command) is checked against
// the sandbox's limit (which counts its team's), one in a terminal
// sandbox against none, any other run against its team's.
func TestBudget(t *testing.T) {
	running := api.Sandbox{ID: "sbx_1", TeamID: "team_a", State: api.StateRunning}
	dead := api.Sandbox{ID: "sbx_2", TeamID: "team_a", State: api.StateTerminated}
	tests := []struct {
		name string
		sp   Spec
		want string
	}{
		{"command in a running sandbox", Spec{Kind: Command, TeamID: "team_a", Sandbox: &running}, "sandbox"},
		{"command in a terminated sandbox", Spec{Kind: Command, TeamID: "team_a", Sandbox: &dead}, ""},
		{"new sandbox", Spec{Kind: Sandbox, TeamID: "team_a"}, "team"},
		{"workload", Spec{Kind: Workload, TeamID: "team_a", Command: "x"}, "team"},
	}
	for _, tt := range tests {
		err := Checker{Budgets: budgets{}}.Budget(t.Context(), tt.sp)
		got := ""
		if err != nil {
			got = err.(*api.Error).Message
		}
		if got != tt.want {
			t.Errorf("%s: refused by %q, want %q", tt.name, got, tt.want)
		}
	}
}
