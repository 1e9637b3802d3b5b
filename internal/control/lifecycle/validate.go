package lifecycle

import (
	"fmt"
	"regexp"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/runs"
)

var nameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

const (
	maxEnv         = runs.MaxEnv
	maxEnvValue    = runs.MaxEnvValue
	maxArgv        = runs.MaxArgv
	maxCommandSize = runs.MaxCommandSize
)

func invalid(format string, args ...any) error {
	return api.Errorf(api.CodeInvalidArgument, format, args...)
}

func validateName(name string) error {
	if name == "" {
		return nil
	}
	if !nameRE.MatchString(name) {
		return invalid("name %q is invalid: use 1-63 lowercase letters, digits and '-', starting and ending with a letter or digit", name)
	}
	return nil
}

func validateEnv(what string, env map[string]string) error { return runs.CheckEnv(what, env) }

func validateLabels(labels map[string]string) error { return runs.CheckLabels(labels) }

// validatePath checks an absolute path inside a sandbox and returns it clean.
func validatePath(what, p string) (string, error) { return runs.CheckPath(what, p) }

// resolveResources applies defaults and checks bounds.
func (c *Config) resolveResources(r *api.ResourcesRequest) (api.Resources, error) {
	res := c.DefaultResources
	if r != nil {
		if r.CPUs != nil {
			res.CPUs = *r.CPUs
		}
		if r.MemoryMiB != nil {
			res.MemoryMiB = *r.MemoryMiB
		}
		if r.DiskMiB != nil {
			res.DiskMiB = *r.DiskMiB
		}
	}
	max := c.MaxResources
	switch {
	case res.CPUs < 0.1 || res.CPUs > max.CPUs:
		return res, rangeError("resources.cpus", fmt.Sprint(res.CPUs), "0.1", fmt.Sprint(max.CPUs))
	case res.MemoryMiB < MinMemoryMiB || res.MemoryMiB > max.MemoryMiB:
		return res, rangeError("resources.memory_mib", fmt.Sprint(res.MemoryMiB), fmt.Sprint(MinMemoryMiB), fmt.Sprint(max.MemoryMiB))
	case res.DiskMiB < MinDiskMiB || res.DiskMiB > max.DiskMiB:
		return res, rangeError("resources.disk_mib", fmt.Sprint(res.DiskMiB), fmt.Sprint(MinDiskMiB), fmt.Sprint(max.DiskMiB))
	}
	return res, nil
}

func rangeError(field, got, lo, hi string) error {
	return &api.Error{
		Code:    api.CodeInvalidArgument,
		Message: fmt.Sprintf("%s is %s; it must be between %s and %s", field, got, lo, hi),
		Details: map[string]any{"field": field, "min": lo, "max": hi},
	}
}

// refuseSandboxGPUs answers a sandbox request for GPUs: sandboxes run on
// the CPU-based managed environment; GPU code runs as a workload.
func refuseSandboxGPUs(req api.CreateSandboxRequest) error {
	if req.Resources == nil || req.Resources.GPUs == 0 {
		return nil
	}
	if req.Resources.GPUs < 0 {
		return invalid("resources.gpus is negative")
	}
	return &api.Error{
		Code: api.CodeUnprocessable,
		Message: fmt.Sprintf("sandboxes run on the managed environment, which is CPU-based: they get no GPUs. "+
			"Submit GPU code as a workload instead: POST /v1/workloads with {\"command\": \"…\", \"resources\": {\"gpus\": %d}} "+
			"(CLI: cove workloads submit --gpus %d -- COMMAND…); it is queued until a node with GPUs can run it", req.Resources.GPUs, req.Resources.GPUs),
		Details: map[string]any{"field": "resources.gpus", "use": "POST /v1/workloads"},
	}
}
