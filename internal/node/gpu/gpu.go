// Package gpu finds a node's GPUs through the Container Device Interface
// (CDI): the specs that a vendor's toolkit writes (NVIDIA's `nvidia-ctk
// cdi generate`) in the CDI directories, /etc/cdi and /var/run/cdi by
// default. It counts the devices the node may hand out and edits a
// container's runtime spec for the devices a workload was given: their
// device nodes, mounts and hooks come from the spec through the CDI
// library, never from paths written here.
package gpu

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"
)

// DefaultKind is the kind of device counted as GPUs unless told
// otherwise: the one NVIDIA's toolkit writes.
const DefaultKind = "nvidia.com/gpu"

// DefaultSpecDirs are the standard CDI directories.
var DefaultSpecDirs = slices.Clone(cdi.DefaultSpecDirs)

// Devices are the GPUs of one kind that the CDI specs of a node describe.
type Devices struct {
	cache *cdi.Cache
	kind  string
	names []string // qualified, in index order
}

// Open reads the CDI specs in dirs once (no watching: a node reads its
// devices at start) and keeps the devices of kind (vendor/class; ""
// means DefaultKind). Directories that do not exist hold no devices.
// Specs that do not parse are an error, so an operator learns of them.
func Open(dirs []string, kind string) (*Devices, error) {
	if kind == "" {
		kind = DefaultKind
	}
	vendor, class := parser.ParseQualifier(kind)
	if err := parser.ValidateVendorName(vendor); err != nil || class == "" {
		return nil, fmt.Errorf("gpu kind %q: want vendor/class, such as %s", kind, DefaultKind)
	}
	cache, err := cdi.NewCache(cdi.WithSpecDirs(dirs...), cdi.WithAutoRefresh(false))
	if err != nil {
		return nil, fmt.Errorf("read CDI specs in %s: %w", strings.Join(dirs, ", "), err)
	}
	var errs []error
	for path, es := range cache.GetErrors() {
		for _, e := range es {
			errs = append(errs, fmt.Errorf("CDI spec %s: %w", path, e))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	d := &Devices{cache: cache, kind: kind}
	d.names = pick(kind, cache.ListDevices())
	return d, nil
}

// pick chooses, among qualified device names, the GPUs of kind to hand
// out one by one: those named by index ("0", "1", …) when there are
// any (NVIDIA's default), else every name but "all", which stands for
// all of them together.
func pick(kind string, qualified []string) []string {
	var byIndex, other []string
	for _, q := range qualified {
		vendor, class, name, err := parser.ParseQualifiedName(q)
		if err != nil || vendor+"/"+class != kind || name == "all" {
			continue
		}
		if isIndex(name) {
			byIndex = append(byIndex, q)
		} else {
			other = append(other, q)
		}
	}
	if len(byIndex) > 0 {
		slices.SortFunc(byIndex, func(a, b string) int {
			return compareIndex(a[strings.IndexByte(a, '=')+1:], b[strings.IndexByte(b, '=')+1:])
		})
		return byIndex
	}
	slices.Sort(other)
	return other
}

func isIndex(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

func compareIndex(a, b string) int {
	if len(a) != len(b) {
		return len(a) - len(b)
	}
	return strings.Compare(a, b)
}

// Kind is the kind of device counted (vendor/class).
func (d *Devices) Kind() string { return d.kind }

// Names are the qualified names of the GPUs the node hands out, in order.
func (d *Devices) Names() []string { return slices.Clone(d.names) }

// Inject edits spec for the given devices (qualified CDI names): their
// device nodes (with device cgroup rules), mounts, hooks and environment,
// as their CDI specs say.
func (d *Devices) Inject(spec *specs.Spec, devices []string) error {
	if len(devices) == 0 {
		return nil
	}
	if unresolved, err := d.cache.InjectDevices(spec, devices...); err != nil {
		return fmt.Errorf("inject CDI devices %v (unresolved: %v): %w", devices, unresolved, err)
	}
	return nil
}
