package runs

import (
	"path"
	"regexp"
	"strings"
)

var (
	envKeyRE   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	labelKeyRE = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._/-]{0,62})$`)
)

// Bounds of a run's environment and labels.
const (
	MaxEnv        = 256
	MaxEnvValue   = 32 << 10
	MaxLabels     = 64
	MaxLabelValue = 256
)

// ValidEnvKey says whether k may name an environment variable: letters,
// digits and '_', not starting with a digit.
func ValidEnvKey(k string) bool { return envKeyRE.MatchString(k) }

// CheckEnv checks environment variables (what names them in errors).
func CheckEnv(what string, env map[string]string) error {
	if len(env) > MaxEnv {
		return invalid("%s has %d variables; at most %d are allowed", what, len(env), MaxEnv)
	}
	for k, v := range env {
		if !envKeyRE.MatchString(k) {
			return invalid("%s: variable name %q is invalid: use letters, digits and '_', not starting with a digit", what, k)
		}
		if len(v) > MaxEnvValue {
			return invalid("%s: value of %s is longer than %d bytes", what, k, MaxEnvValue)
		}
		if strings.ContainsRune(v, 0) {
			return invalid("%s: value of %s contains a NUL byte", what, k)
		}
	}
	return nil
}

// CheckLabels checks the labels of a sandbox or workload.
func CheckLabels(labels map[string]string) error {
	if len(labels) > MaxLabels {
		return invalid("%d labels given; at most %d are allowed", len(labels), MaxLabels)
	}
	for k, v := range labels {
		if !labelKeyRE.MatchString(k) {
			return invalid("label key %q is invalid: use up to 63 letters, digits and '._/-'", k)
		}
		if len(v) > MaxLabelValue || strings.ContainsRune(v, 0) {
			return invalid("label %s: value must be at most %d bytes without NUL", k, MaxLabelValue)
		}
	}
	return nil
}

// CheckPath checks an absolute path inside a container and returns it
// clean.
func CheckPath(what, p string) (string, error) {
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
