package cove

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/cove-dev/cove/api"
)

// The SDK's models against api/openapi.json, field by field. The SDK's
// models are the api module's types (plus the few request bodies it
// builds itself): every schema an operation takes or returns must be the
// type of a parameter or result of the Client method that offers it (or a
// body that method builds, listed in builtBodies), and every such type,
// with every type its fields reach, must have exactly the JSON fields of
// its schema. An enum schema must be a named type, not a bare string.

// builtBodies names, per request schema, the value a method sends where
// it takes the body's fields as arguments rather than the body itself;
// the method's source must name that type.
var builtBodies = map[string]struct {
	method string
	value  any
}{
	"SignalRequest":         {"Signal", signalRequest{}},
	"CreateTeamRequest":     {"CreateTeam", api.CreateTeamRequest{}},
	"EditFileRequest":       {"EditFile", api.EditFileRequest{}},
	"MkdirRequest":          {"Mkdir", api.MkdirRequest{}},
	"MoveRequest":           {"MoveFile", api.MoveRequest{}},
	"PutSecretRequest":      {"PutSecret", api.PutSecretRequest{}},
	"CreateTicketRequest":   {"CreateTicket", api.CreateTicketRequest{}},
	"CreateSnapshotRequest": {"CreateSnapshot", api.CreateSnapshotRequest{}},
	"RestoreSandboxRequest": {"RestoreSandbox", api.RestoreSandboxRequest{}},
	"ForkResult":            {"ForkSandbox", api.ForkResult{}},
	"CreateVolumeRequest":   {"CreateVolume", api.CreateVolumeRequest{}},
}

// alsoOffered names further methods that offer an operation: createCommand
// answers a Command, or with wait a CommandResult (ExecWait).
var alsoOffered = map[string][]string{
	"createCommand": {"ExecWait"},
}

// apiDrift lists fields where an api type and its schema differ today, in
// the api module (not the SDK's to fix): they are logged, not failed.
var apiDrift = map[string]string{
	"NetworkPolicyRequest.setup_allow": "api.NetworkPolicy models both the sandbox's policy and the request's; the request schema leaves setup_allow out",
}

// openapiDoc reads api/openapi.json from the tree, as it is now.
func openapiDoc(t *testing.T) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "api", "openapi.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	return doc
}

type schemas map[string]map[string]any

func (s schemas) resolve(ref string) (string, map[string]any) {
	name := strings.TrimPrefix(ref, "#/components/schemas/")
	return name, s[name]
}

// properties gathers an object schema's properties, through allOf.
func (s schemas) properties(sc map[string]any) map[string]map[string]any {
	out := map[string]map[string]any{}
	if ref, ok := sc["$ref"].(string); ok {
		_, sc = s.resolve(ref)
	}
	for _, part := range asList(sc["allOf"]) {
		for k, v := range s.properties(part.(map[string]any)) {
			out[k] = v
		}
	}
	for k, v := range asMap(sc["properties"]) {
		out[k] = v.(map[string]any)
	}
	return out
}

func asMap(v any) map[string]any { m, _ := v.(map[string]any); return m }
func asList(v any) []any         { l, _ := v.([]any); return l }

// refsOf lists the schema names a body or response schema names: a $ref,
// each $ref of a oneOf.
func refsOf(sc map[string]any) []string {
	if ref, ok := sc["$ref"].(string); ok {
		return []string{strings.TrimPrefix(ref, "#/components/schemas/")}
	}
	var out []string
	for _, alt := range asList(sc["oneOf"]) {
		out = append(out, refsOf(asMap(alt))...)
	}
	return out
}

// operationSchemas lists, per operationId, the JSON schemas its request
// body and its 2xx answers name.
func operationSchemas(doc map[string]any) (takes, returns map[string][]string) {
	takes, returns = map[string][]string{}, map[string][]string{}
	for _, item := range asMap(doc["paths"]) {
		for verb, op := range asMap(item) {
			switch verb {
			case "get", "put", "post", "delete", "patch":
			default:
				continue
			}
			o := asMap(op)
			id, _ := o["operationId"].(string)
			for mt, c := range asMap(asMap(o["requestBody"])["content"]) {
				if mt == "application/json" {
					takes[id] = append(takes[id], refsOf(asMap(asMap(c)["schema"]))...)
				}
			}
			for code, r := range asMap(o["responses"]) {
				if !strings.HasPrefix(code, "2") {
					continue
				}
				for mt, c := range asMap(asMap(r)["content"]) {
					if mt == "application/json" || mt == "application/x-ndjson" {
						returns[id] = append(returns[id], refsOf(asMap(asMap(c)["schema"]))...)
					}
				}
			}
		}
	}
	return takes, returns
}

// goTypes lists the named types a method's signature carries: its
// parameters and results, through pointers, slices, callbacks and
// api.List[T] (which stands for every <T>List schema).
func goTypes(m reflect.Type) []reflect.Type {
	var out []reflect.Type
	var walk func(reflect.Type)
	walk = func(t reflect.Type) {
		switch t.Kind() {
		case reflect.Pointer, reflect.Slice:
			walk(t.Elem())
			return
		case reflect.Func:
			for i := range t.NumIn() {
				walk(t.In(i))
			}
			return
		}
		if t.Name() != "" {
			out = append(out, t)
		}
	}
	for i := range m.NumIn() {
		walk(m.In(i))
	}
	for i := range m.NumOut() {
		walk(m.Out(i))
	}
	return out
}

// matches reports whether Go type t is schema name's model: a type of that
// name, or api.List[T] / []T for a list schema whose items are T.
func (s schemas) matches(name string, t reflect.Type) bool {
	if t.Name() == name {
		return true
	}
	items := s.properties(s[name])["items"]
	ref, _ := asMap(items["items"])["$ref"].(string)
	if ref == "" || len(s.properties(s[name])) != 2 {
		return false
	}
	elem, _ := s.resolve(ref)
	if strings.HasPrefix(t.Name(), "List[") && t.Field(0).Type.Elem().Name() == elem {
		return true
	}
	return t.Name() == elem // []T: the SDK walks the pages itself
}

// TestModelsAreAPITypes checks that each schema an operation takes or
// returns is an api type in the signature of the Client method that
// offers it (or a body that method builds, listed in builtBodies).
func TestModelsAreAPITypes(t *testing.T) {
	doc := openapiDoc(t)
	sc := docSchemas(doc)
	takes, returns := operationSchemas(doc)
	src := methodSources(t)
	client := reflect.TypeOf(&Client{})
	ops := make([]string, 0, len(operations))
	for op := range operations {
		ops = append(ops, op)
	}
	sort.Strings(ops)
	for _, op := range ops {
		name := operations[op]
		var sig []reflect.Type
		for _, n := range append([]string{name}, alsoOffered[op]...) {
			if m, ok := client.MethodByName(n); ok { // else TestContract reports it
				sig = append(sig, goTypes(m.Type)...)
			}
		}
		for _, want := range append(append([]string{}, takes[op]...), returns[op]...) {
			found := false
			for _, gt := range sig {
				if gt.PkgPath() == reflect.TypeOf(api.Sandbox{}).PkgPath() && sc.matches(want, gt) {
					found = true
				}
			}
			if b, ok := builtBodies[want]; ok && b.method == name {
				bt := reflect.TypeOf(b.value)
				if !strings.Contains(src[name], typeExpr(bt)) {
					t.Errorf("%s: Client.%s is listed as sending %s but its source does not name it", op, name, typeExpr(bt))
				}
				found = true
			}
			if !found {
				t.Errorf("%s: schema %s is no api type in the signature of Client.%s (%v)", op, want, name, sig)
			}
		}
	}
}

// TestModelFields checks every model of the SDK field by field against
// its schema, and the models its fields reach, recursively.
func TestModelFields(t *testing.T) {
	doc := openapiDoc(t)
	sc := docSchemas(doc)
	takes, returns := operationSchemas(doc)
	client := reflect.TypeOf(&Client{})
	seen := map[string]bool{}
	var check func(schema string, gt reflect.Type)
	check = func(schema string, gt reflect.Type) {
		key := schema + "=" + gt.String()
		if seen[key] {
			return
		}
		seen[key] = true
		def, ok := sc[schema]
		if !ok {
			t.Errorf("schema %s (modelled by %s) is not in api/openapi.json", schema, gt)
			return
		}
		if _, enum := def["enum"]; enum {
			if gt.Kind() != reflect.String || gt.Name() == "string" || gt.Name() == "" {
				t.Errorf("schema %s is an enum; its model %s must be a named string type", schema, gt)
			}
			return
		}
		if gt.Kind() != reflect.Struct {
			t.Errorf("schema %s: model %s is not a struct", schema, gt)
			return
		}
		props := sc.properties(def)
		fields := jsonFields(gt)
		for _, n := range sortedKeys(props) {
			f, ok := fields[n]
			if !ok {
				t.Errorf("schema %s has field %q; its model %s has none", schema, n, gt)
				continue
			}
			checkRef(sc, props[n], f.Type, check)
		}
		for _, n := range sortedKeys(fields) {
			if why, ok := apiDrift[schema+"."+n]; ok {
				t.Logf("known drift: %s.%s: %s", schema, n, why)
				continue
			}
			if _, ok := props[n]; !ok {
				t.Errorf("model %s has field %q; schema %s has none", gt, n, schema)
			}
		}
	}
	ops := sortedKeys(operations)
	for _, op := range ops {
		var sig []reflect.Type
		for _, n := range append([]string{operations[op]}, alsoOffered[op]...) {
			if m, ok := client.MethodByName(n); ok {
				sig = append(sig, goTypes(m.Type)...)
			}
		}
		for _, want := range append(append([]string{}, takes[op]...), returns[op]...) {
			for _, gt := range sig {
				if sc.matches(want, gt) {
					if gt.Name() == want {
						check(want, gt)
					} else {
						items, _ := sc.resolve(asMap(sc.properties(sc[want])["items"]["items"])["$ref"].(string))
						check(items, elemOf(gt))
					}
				}
			}
			if b, ok := builtBodies[want]; ok {
				check(want, reflect.TypeOf(b.value))
			}
		}
	}
	if len(seen) < 40 {
		t.Errorf("only %d models were checked: the walk lost its way", len(seen))
	}
}

// checkRef follows a property that names a schema (directly, as array
// items or as map values) to the Go type of the field.
func checkRef(sc schemas, prop map[string]any, gt reflect.Type, check func(string, reflect.Type)) {
	for gt.Kind() == reflect.Pointer {
		gt = gt.Elem()
	}
	if ref, ok := prop["$ref"].(string); ok {
		name, _ := sc.resolve(ref)
		check(name, gt)
		return
	}
	switch {
	case gt.Kind() == reflect.Slice && prop["items"] != nil:
		checkRef(sc, asMap(prop["items"]), gt.Elem(), check)
	case gt.Kind() == reflect.Map && asMap(prop["additionalProperties"]) != nil:
		checkRef(sc, asMap(prop["additionalProperties"]), gt.Elem(), check)
	}
}

func elemOf(t reflect.Type) reflect.Type {
	if strings.HasPrefix(t.Name(), "List[") {
		return t.Field(0).Type.Elem()
	}
	return t
}

// jsonFields lists a struct's JSON field names, through embedded structs,
// as encoding/json does.
func jsonFields(t reflect.Type) map[string]reflect.StructField {
	out := map[string]reflect.StructField{}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if name == "-" || (!f.IsExported() && !f.Anonymous) {
			continue
		}
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				for k, v := range jsonFields(ft) {
					if _, ok := out[k]; !ok {
						out[k] = v
					}
				}
				continue
			}
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f
	}
	return out
}

func docSchemas(doc map[string]any) schemas {
	out := schemas{}
	for k, v := range asMap(asMap(doc["components"])["schemas"]) {
		out[k] = asMap(v)
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// typeExpr is how this package's source names t: api.X, or x for its own.
func typeExpr(t reflect.Type) string {
	if t.PkgPath() == reflect.TypeOf(Client{}).PkgPath() {
		return t.Name() + "{"
	}
	return "api." + t.Name() + "{"
}

// methodSources maps each method of *Client to its source text.
func methodSources(t *testing.T) map[string]string {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		af, err := parser.ParseFile(fset, f, b, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range af.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv != nil {
				out[fd.Name.Name] = string(b[fset.Position(fd.Pos()).Offset:fset.Position(fd.End()).Offset])
			}
		}
	}
	return out
}

// queryStructs are the SDK's own structs that carry an operation's query
// parameters; each field is a parameter by one rule (snake_case, and a
// slice or map field is the repeated parameter's name in the plural:
// States → state, GroupBy → group_by).
var queryStructs = []struct {
	op      string
	value   any
	leftOut map[string]string // parameter → why the struct has no field for it
	unused  map[string]string // field → why the operation takes no parameter for it
}{
	{"listSandboxes", SandboxQuery{}, nil, nil},
	{"listEvents", EventQuery{}, map[string]string{"cursor": "After (an event ID) pages the log; Events is also FollowEvents' query"}, nil},
	{"streamEvents", EventQuery{}, map[string]string{"Last-Event-ID": "FollowEvents resumes with After itself"},
		map[string]string{"Limit": "a stream has no page size: the server ignores it"}},
	{"sandboxMetrics", MetricsQuery{}, nil, nil},
	{"usage", UsageQuery{}, nil, nil},
}

// TestQueryStructs checks the SDK's query structs field by field against
// their operations' query parameters.
func TestQueryStructs(t *testing.T) {
	doc := openapiDoc(t)
	shared := asMap(asMap(doc["components"])["parameters"])
	params := map[string]map[string]bool{}
	for _, item := range asMap(doc["paths"]) {
		for verb, op := range asMap(item) {
			switch verb {
			case "get", "put", "post", "delete", "patch":
			default:
				continue
			}
			o := asMap(op)
			set := map[string]bool{}
			for _, p := range asList(o["parameters"]) {
				pm := asMap(p)
				if ref, ok := pm["$ref"].(string); ok {
					pm = asMap(shared[strings.TrimPrefix(ref, "#/components/parameters/")])
				}
				if pm["in"] == "query" || pm["in"] == "header" {
					set[pm["name"].(string)] = true
				}
			}
			params[o["operationId"].(string)] = set
		}
	}
	for _, q := range queryStructs {
		want, ok := params[q.op]
		if !ok {
			t.Errorf("%s: no such operation in api/openapi.json", q.op)
			continue
		}
		have := map[string]string{}
		rt := reflect.TypeOf(q.value)
		for i := range rt.NumField() {
			f := rt.Field(i)
			have[queryName(f)] = f.Name
		}
		for p := range want {
			if _, ok := have[p]; !ok && q.leftOut[p] == "" {
				t.Errorf("%s: parameter %q has no field in %s", q.op, p, rt.Name())
			}
		}
		for p, f := range have {
			if !want[p] && q.unused[f] == "" {
				t.Errorf("%s: %s.%s (parameter %q) is no parameter of the operation", q.op, rt.Name(), f, p)
			}
		}
	}
}

// queryName is a query field's parameter: snake_case, a slice or map
// field's name in the singular.
func queryName(f reflect.StructField) string {
	var b strings.Builder
	for i, r := range f.Name {
		if r >= 'A' && r <= 'Z' {
			if i > 0 {
				b.WriteByte('_')
			}
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	s := b.String()
	if k := f.Type.Kind(); k == reflect.Slice || k == reflect.Map {
		s = strings.TrimSuffix(s, "s")
	}
	return s
}
