package server

import (
	"fmt"
	"path"
	"regexp"
	"strings"

	"github.com/cove-dev/cove/api"
)

var (
	nameRE     = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
	envKeyRE   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	labelKeyRE = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._/-]{0,62})$`)
)

const (
	maxEnv         = 256
	maxEnvValue    = 32 << 10
	maxLabels      = 64
	maxLabelValue  = 256
	maxArgv        = 4096
	maxCommandSize = 256 << 10
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

func validateEnv(what string, env map[string]string) error {
	if len(env) > maxEnv {
		return invalid("%s has %d variables; at most %d are allowed", what, len(env), maxEnv)
	}
	for k, v := range env {
		if !envKeyRE.MatchString(k) {
			return invalid("%s: variable name %q is invalid: use letters, digits and '_', not starting with a digit", what, k)
		}
		if len(v) > maxEnvValue {
			return invalid("%s: value of %s is longer than %d bytes", what, k, maxEnvValue)
		}
		if strings.ContainsRune(v, 0) {
			return invalid("%s: value of %s contains a NUL byte", what, k)
		}
	}
	return nil
}

func validateLabels(labels map[string]string) error {
	if len(labels) > maxLabels {
		return invalid("%d labels given; at most %d are allowed", len(labels), maxLabels)
	}
	for k, v := range labels {
		if !labelKeyRE.MatchString(k) {
			return invalid("label key %q is invalid: use up to 63 letters, digits and '._/-'", k)
		}
		if len(v) > maxLabelValue || strings.ContainsRune(v, 0) {
			return invalid("label %s: value must be at most %d bytes without NUL", k, maxLabelValue)
		}
	}
	return nil
}

// validatePath checks an absolute path inside a sandbox and returns it clean.
func validatePath(what, p string) (string, error) {
	switch {
	case p == "":
		return "", invalid("%s is empty; give an absolute path", what)
	case strings.ContainsRune(p, 0):
		return "", invalid("%s contains a NUL byte", what)
	case !strings.HasPrefix(p, "/"):
		return "", invalid("%s %q is relative; give an absolute path such as /workspace", what, p)
	case len(p) > 4096:
		return "", invalid("%s is longer than 4096 bytes", what)
	}
	return path.Clean(p), nil
}

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
