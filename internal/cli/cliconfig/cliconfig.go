// Package cliconfig fills a cobra command's flags from a config file
// (--config FILE, TOML or YAML by extension) and from COVE_* environment
// variables, and prints the merged result (--print-config).
//
// File keys are the flag names (listen, data-dir); environment names are
// COVE_ plus the flag in upper snake case (COVE_LISTEN, COVE_DATA_DIR).
// Precedence: flag > environment > file > default. A COVE_* variable that
// names no flag of the command is ignored (test harnesses and the CLI set
// others, COVE_BIN, COVE_API_KEY); a file key that names no flag is an error.
package cliconfig

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/knadh/koanf/parsers/toml/v2"
	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/file"
	"github.com/knadh/koanf/v2"
	gotoml "github.com/pelletier/go-toml/v2"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Flag names this package adds and never reads from a file or the
// environment, beside cobra's own.
const (
	ConfigFlag      = "config"
	PrintConfigFlag = "print-config"
)

// EnvPrefix starts every environment variable that sets a flag.
const EnvPrefix = "COVE_"

// skip are flags no file or variable sets.
var skip = map[string]bool{ConfigFlag: true, PrintConfigFlag: true, "help": true, "version": true}

// EnvName is the environment variable of a flag: COVE_ plus its name in
// upper snake case.
func EnvName(flag string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// Install adds --config and --print-config to root as persistent flags and
// a PersistentPreRunE that applies the file and the environment to the
// flags of whichever command runs, before an existing PersistentPreRunE.
// --print-config prints the merged flags as TOML to out and ends the
// command without running it.
func Install(root *cobra.Command, getenv func(string) string) {
	root.PersistentFlags().String(ConfigFlag, "", "read flags from this TOML or YAML file (keys are flag names; default $COVE_CONFIG); flags and COVE_* variables override it")
	root.PersistentFlags().Bool(PrintConfigFlag, false, "print the merged configuration as TOML (credentials masked) and exit")
	next := root.PersistentPreRunE
	root.PersistentPreRunE = func(cmd *cobra.Command, args []string) error {
		path, _ := cmd.Flags().GetString(ConfigFlag)
		if path == "" && getenv != nil {
			path = getenv(EnvName(ConfigFlag))
		}
		if err := Apply(cmd.Flags(), path, getenv); err != nil {
			return err
		}
		if p, _ := cmd.Flags().GetBool(PrintConfigFlag); p {
			out := cmd.OutOrStdout()
			cmd.RunE = func(*cobra.Command, []string) error { return Print(out, cmd.CommandPath(), cmd.Flags()) }
			cmd.Run = nil
			cmd.PreRunE, cmd.PreRun, cmd.PostRunE, cmd.PostRun = nil, nil, nil, nil
			return nil
		}
		if next != nil {
			return next(cmd, args)
		}
		return nil
	}
}

// Apply sets every flag of fs not given on the command line from its
// COVE_* variable, or else from the file at path (none when path is "").
func Apply(fs *pflag.FlagSet, path string, getenv func(string) string) error {
	values, err := Load(path)
	if err != nil {
		return err
	}
	for key := range values {
		if f := fs.Lookup(key); f == nil || skip[key] {
			return fmt.Errorf("%s: %s: unknown key (not a flag of this command)", path, key)
		}
	}
	var errs []error
	fs.VisitAll(func(f *pflag.Flag) {
		if len(errs) > 0 || skip[f.Name] || f.Changed {
			return
		}
		if getenv != nil {
			if v := getenv(EnvName(f.Name)); v != "" {
				if err := setString(fs, f, v); err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", EnvName(f.Name), err))
				}
				return
			}
		}
		if v, ok := values[f.Name]; ok {
			if err := setFile(fs, f, v); err != nil {
				errs = append(errs, fmt.Errorf("%s: %s: %w", path, f.Name, err))
			}
		}
	})
	return errors.Join(errs...)
}

// Load reads a config file's top-level keys; TOML for .toml, YAML for .yaml
// and .yml.
func Load(path string) (map[string]any, error) {
	if path == "" {
		return nil, nil
	}
	var parser koanf.Parser
	switch strings.ToLower(filepath.Ext(path)) {
	case ".toml":
		parser = toml.Parser()
	case ".yaml", ".yml":
		parser = yaml.Parser()
	default:
		return nil, fmt.Errorf("%s: a config file is .toml, .yaml or .yml", path)
	}
	k := koanf.New(".")
	if err := k.Load(file.Provider(path), parser); err != nil {
		msg := err.Error()
		// The file provider and parsers name the path themselves at times.
		msg = strings.TrimPrefix(msg, path+": ")
		return nil, fmt.Errorf("%s: %s", path, strings.Join(strings.Fields(msg), " "))
	}
	return k.Raw(), nil
}

// setString sets f from an environment value: a list flag's items are
// comma-separated.
func setString(fs *pflag.FlagSet, f *pflag.Flag, v string) error {
	if sv, ok := f.Value.(pflag.SliceValue); ok {
		var items []string
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s != "" {
				items = append(items, s)
			}
		}
		return replace(f, sv, items)
	}
	return set(fs, f, v)
}

func replace(f *pflag.Flag, sv pflag.SliceValue, items []string) error {
	if items == nil {
		items = []string{}
	}
	if err := sv.Replace(items); err != nil {
		return fmt.Errorf("invalid value %q for a list of %s: %v", strings.Join(items, ","), strings.TrimSuffix(strings.TrimSuffix(f.Value.Type(), "Slice"), "Array"), err)
	}
	f.Changed = true
	return nil
}

func set(fs *pflag.FlagSet, f *pflag.Flag, v string) error {
	if err := fs.Set(f.Name, v); err != nil {
		return fmt.Errorf("invalid value %q for %s: %s", v, typeName(f), lastPart(err))
	}
	return nil
}

// lastPart is the reason in a strconv or time error, without the value
// repeated.
func lastPart(err error) string {
	var ne *strconv.NumError
	if errors.As(err, &ne) {
		return ne.Err.Error()
	}
	msg := err.Error()
	if i := strings.LastIndex(msg, ": "); i >= 0 {
		msg = msg[i+2:]
	}
	return msg
}

func typeName(f *pflag.Flag) string {
	switch t := f.Value.Type(); {
	case strings.HasPrefix(t, "int"), strings.HasPrefix(t, "uint"):
		return "an integer"
	case strings.HasPrefix(t, "float"):
		return "a number"
	case t == "bool":
		return "a boolean (true or false)"
	case t == "duration":
		return `a duration ("30s", "5m")`
	default:
		return "a " + t
	}
}

// setFile sets f from a value a file parser gave.
func setFile(fs *pflag.FlagSet, f *pflag.Flag, v any) error {
	if sv, ok := f.Value.(pflag.SliceValue); ok {
		switch x := v.(type) {
		case []any:
			items := make([]string, 0, len(x))
			for _, e := range x {
				s, err := scalar(e)
				if err != nil {
					return fmt.Errorf("list items must be plain values: %v", err)
				}
				items = append(items, s)
			}
			return replace(f, sv, items)
		case string:
			return setString(fs, f, x)
		}
	}
	s, err := scalar(v)
	if err != nil {
		return fmt.Errorf("expected %s, got %v", typeName(f), err)
	}
	if _, isStr := v.(string); !isStr && f.Value.Type() == "string" {
		return fmt.Errorf("expected a string, got %v (quote it)", v)
	}
	return set(fs, f, s)
}

// scalar is a file value as the flag's text.
func scalar(v any) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case bool:
		return strconv.FormatBool(x), nil
	case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64:
		return fmt.Sprint(x), nil
	case float32:
		return strconv.FormatFloat(float64(x), 'f', -1, 32), nil
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64), nil
	case []any:
		return "", errors.New("a list")
	case map[string]any:
		return "", errors.New("a table")
	case time.Time:
		return "", errors.New("a date (quote it)")
	case nil:
		return "", errors.New("nothing")
	default:
		return "", fmt.Errorf("a %T", v)
	}
}

// Values are the flags of fs as typed TOML values, with credentials
// masked; this package's own flags and cobra's are left out.
func Values(fs *pflag.FlagSet) map[string]any {
	m := map[string]any{}
	fs.VisitAll(func(f *pflag.Flag) {
		if skip[f.Name] {
			return
		}
		m[f.Name] = typed(f, f.Value.String(), true)
	})
	return m
}

// typed is a flag's value text as the TOML value it is written as.
func typed(f *pflag.Flag, text string, mask bool) any {
	if sv, ok := f.Value.(pflag.SliceValue); ok {
		items := sv.GetSlice()
		if text != f.Value.String() {
			// A default, as pflag writes it: [a,b].
			items = nil
			if t := strings.TrimSuffix(strings.TrimPrefix(text, "["), "]"); t != "" {
				items = strings.Split(t, ",")
			}
		}
		if items == nil {
			items = []string{}
		}
		out := make([]string, len(items))
		for i, s := range items {
			out[i] = s
			if mask {
				out[i] = Mask(f.Name, s)
			}
		}
		return out
	}
	switch t := f.Value.Type(); {
	case t == "bool":
		if b, err := strconv.ParseBool(text); err == nil {
			return b
		}
	case strings.HasPrefix(t, "int") || strings.HasPrefix(t, "uint"):
		if n, err := strconv.ParseInt(text, 10, 64); err == nil {
			return n
		}
	case strings.HasPrefix(t, "float"):
		if n, err := strconv.ParseFloat(text, 64); err == nil {
			return n
		}
	}
	if mask {
		return Mask(f.Name, text)
	}
	return text
}

// Masked replaces a credential in printed configuration.
const Masked = "********"

// sensitive reports whether a flag or query parameter name holds a
// credential inline (not a file naming one).
func sensitive(name string) bool {
	n := strings.ToLower(name)
	for _, suffix := range []string{"-file", "-files", "-path", "-dir", "_file", "-ttl"} {
		if strings.HasSuffix(n, suffix) {
			return false
		}
	}
	for _, w := range []string{"key", "token", "secret", "password", "passwd", "credential"} {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

// Mask hides the credentials in a flag's value: the whole value of a flag
// named for a credential (key, token, secret, password) given inline, a
// URL's password, and URL query parameters named for a credential.
func Mask(flag, value string) string {
	if value == "" {
		return value
	}
	if sensitive(flag) && !strings.HasSuffix(strings.ToLower(flag), "credentials") {
		return Masked
	}
	u, err := url.Parse(value)
	if err != nil || u.Scheme == "" {
		return value
	}
	changed := false
	if u.User != nil {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), Masked)
			changed = true
		}
	}
	if u.RawQuery != "" {
		q := u.Query()
		for k := range q {
			if sensitive(k) {
				q.Set(k, Masked)
				changed = true
			}
		}
		if changed {
			u.RawQuery = q.Encode()
		}
	}
	if !changed {
		return value
	}
	s, err := url.PathUnescape(u.String())
	if err != nil {
		return u.String()
	}
	return s
}

// Print writes the merged flags of fs as TOML, credentials masked.
func Print(w io.Writer, command string, fs *pflag.FlagSet) error {
	b, err := gotoml.Marshal(Values(fs))
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "# %s: merged configuration (flags > COVE_* variables > --config file > defaults)\n%s", command, b)
	return err
}

// Example writes a commented config file listing every flag of fs with
// its help and its default, each key commented out.
func Example(w io.Writer, header string, fs *pflag.FlagSet) error {
	var names []string
	fs.VisitAll(func(f *pflag.Flag) {
		if !skip[f.Name] && !f.Hidden {
			names = append(names, f.Name)
		}
	})
	sort.Strings(names)
	var b strings.Builder
	b.WriteString(header)
	for _, n := range names {
		f := fs.Lookup(n)
		line, err := gotoml.Marshal(map[string]any{n: typed(f, f.DefValue, false)})
		if err != nil {
			return err
		}
		b.WriteString("\n")
		for _, l := range wrap(f.Usage, 74) {
			b.WriteString("# " + l + "\n")
		}
		b.WriteString("# " + EnvName(n) + "\n")
		b.WriteString("#" + n + strings.TrimPrefix(strings.TrimSpace(string(line)), n) + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func wrap(s string, width int) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(s) {
		if line != "" && len(line)+1+len(w) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	if line != "" {
		lines = append(lines, line)
	}
	return lines
}
