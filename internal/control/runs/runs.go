// Package runs describes everything the control plane runs — a sandbox,
// its setup, a workload, a template's self-test — as one validated Spec
// (the RunSpec). Each entry point builds its Spec once; Checker runs the
// checks every run passes (admission, image readiness and limits,
// secrets, sources, the team's budget) on it in one place; Exits hands
// the node's exit reports to the receiver registered for each run.
//
// It declares the services it checks through (Admission, Images,
// Secrets, Sources, Budgets) and imports neither the core nor a feature.
package runs

import (
	"fmt"
	"strings"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/node"
)

// Kind says what a run is.
type Kind string

const (
	Sandbox  Kind = "sandbox"   // a sandbox's container, for its life
	Setup    Kind = "setup"     // a sandbox's setup command
	Workload Kind = "workload"  // a batch run in a container of its own
	SelfTest Kind = "self-test" // a template's self-test, outside the store
	Command  Kind = "command"   // a command in a running sandbox
)

// Bounds of a run's program.
const (
	MaxCommandSize = 256 << 10
	MaxArgv        = 4096
	MaxTimeoutS    = 7 * 24 * 3600
	MaxGPUs        = 64
)

// Spec is one run as the control plane checked it: what it runs in
// (template or image, resources, network), what it runs (a shell
// command or argv, env, user, workdir, secrets, source) and for how long.
type Spec struct {
	Kind   Kind
	TeamID string
	// Template names the template or image (as the team names it);
	// Image is that image when it is an imported one.
	Template  string
	Image     *api.Image
	Resources api.Resources
	GPUs      int
	GPUType   string
	// Command (a shell string) or Argv is the program; a sandbox has none.
	Command string
	Argv    []string
	Env     map[string]string
	// Secrets are environment variables → the team's secret names.
	Secrets map[string]string
	User    string
	Workdir string
	Source  *api.Source
	Network api.NetworkPolicy
	// TimeoutS bounds the program (0: none).
	TimeoutS int64
	// Setup is a sandbox's setup run, checked with it.
	Setup *Spec
	// Sandbox is the existing sandbox a command runs in: its own spend
	// limit counts beside its team's.
	Sandbox *api.Sandbox
}

// Validate checks what the Spec says on its own: its program's shape,
// its user, its timeout and its GPUs.
func (s Spec) Validate() error {
	switch s.Kind {
	case Sandbox:
		if s.Command != "" || len(s.Argv) > 0 {
			return invalid("a sandbox runs no program of its own")
		}
	case Setup, Workload, SelfTest, Command:
		if err := CheckProgram(s.Command, s.Argv); err != nil {
			return err
		}
	default:
		return fmt.Errorf("run kind %q is unknown", s.Kind)
	}
	if s.User != "" {
		if _, ok := node.Users[s.User]; !ok {
			return invalid("user %q is unknown; use user or root", s.User)
		}
	}
	if s.TimeoutS < 0 || s.TimeoutS > MaxTimeoutS {
		return rangeError("timeout_s", fmt.Sprint(s.TimeoutS), "0", fmt.Sprint(MaxTimeoutS))
	}
	if s.Image != nil && s.Command != "" && len(s.Image.Config.Shell) == 0 {
		return invalid("image %s has no shell (/bin/sh or /bin/bash); run the program with argv instead of command", s.Image.Name)
	}
	if s.Kind != Workload {
		return nil
	}
	if s.GPUs < 0 || s.GPUs > MaxGPUs {
		return rangeError("resources.gpus", fmt.Sprint(s.GPUs), "0", fmt.Sprint(MaxGPUs))
	}
	if s.GPUType != "" && s.GPUs == 0 {
		return invalid("resources.gpu_type is set but resources.gpus is 0")
	}
	if len(s.GPUType) > 128 || strings.ContainsRune(s.GPUType, 0) {
		return invalid("resources.gpu_type is not a GPU type")
	}
	return nil
}

// CheckProgram checks a program given as a shell string or as an argv:
// exactly one of them, within bounds, without NUL.
func CheckProgram(command string, argv []string) error {
	switch {
	case command != "" && len(argv) > 0:
		return invalid("give either command or argv, not both")
	case command != "":
		if len(command) > MaxCommandSize || strings.ContainsRune(command, 0) {
			return invalid("command must be at most %d bytes without NUL", MaxCommandSize)
		}
	case len(argv) > 0:
		if len(argv) > MaxArgv {
			return invalid("argv has %d items; at most %d are allowed", len(argv), MaxArgv)
		}
		total := 0
		for _, a := range argv {
			if strings.ContainsRune(a, 0) {
				return invalid("argv contains a NUL byte")
			}
			total += len(a)
		}
		if total > MaxCommandSize {
			return invalid("argv is longer than %d bytes", MaxCommandSize)
		}
		if argv[0] == "" {
			return invalid("argv[0] is empty; name the program to run")
		}
	default:
		return invalid("give command (a shell string) or argv (a list)")
	}
	return nil
}

func invalid(format string, args ...any) error {
	return api.Errorf(api.CodeInvalidArgument, format, args...)
}

func rangeError(field, got, lo, hi string) error {
	return &api.Error{
		Code:    api.CodeInvalidArgument,
		Message: fmt.Sprintf("%s is %s; it must be between %s and %s", field, got, lo, hi),
		Details: map[string]any{"field": field, "min": lo, "max": hi},
	}
}
