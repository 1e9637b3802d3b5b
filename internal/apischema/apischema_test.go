package apischema

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
)

// apiDir is the api package: two levels up from this one.
var apiDir = filepath.Join("..", "..", "api")

// TestOpenAPIMatchesAPITypes is the drift check: api/openapi.json's
// components.schemas must be what the Go types in api/ generate. A field
// added to a type without `make openapi`, or a schema edited by hand,
// fails it, naming the schema and the field.
func TestOpenAPIMatchesAPITypes(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(apiDir, "openapi.json"))
	if err != nil {
		t.Fatal(err)
	}
	schemas, err := Generate(apiDir)
	if err != nil {
		t.Fatal(err)
	}
	want, err := Document(doc, schemas)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(doc, want) {
		return
	}
	diffs, err := diffSchemas(doc, want)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range diffs {
		t.Error(d)
	}
	if len(diffs) == 0 {
		t.Error("api/openapi.json's schemas differ from the Go types' in layout only")
	}
	t.Log("the Go types in api/ are the source: run `make openapi` to rewrite api/openapi.json's components.schemas from them (and commit both)")
}

// diffSchemas says, schema by schema and property by property, how the
// components.schemas of document have differ from those of generated.
func diffSchemas(document, generated []byte) ([]string, error) {
	have, err := schemasOf(document)
	if err != nil {
		return nil, fmt.Errorf("api/openapi.json: %w", err)
	}
	want, err := schemasOf(generated)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, name := range sortedKeys(have, want) {
		h, inDoc := have[name]
		w, inGo := want[name]
		switch {
		case !inGo:
			out = append(out, fmt.Sprintf("schema %s: in api/openapi.json but no Go type in api/ makes it (internal/apischema/components.go lists them)", name))
			continue
		case !inDoc:
			out = append(out, fmt.Sprintf("schema %s: the Go types make it but api/openapi.json lacks it", name))
			continue
		}
		out = append(out, diffObject("schema "+name, h, w)...)
	}
	return out, nil
}

// diffObject compares one schema (or a property's schema), descending
// into its properties and allOf parts so a difference names its field.
func diffObject(where string, have, want map[string]any) []string {
	var out []string
	for _, k := range sortedKeys(have, want) {
		h, w := have[k], want[k]
		if reflect.DeepEqual(h, w) {
			continue
		}
		switch k {
		case "properties":
			hp, _ := h.(map[string]any)
			wp, _ := w.(map[string]any)
			for _, p := range sortedKeys(hp, wp) {
				hs, inDoc := hp[p].(map[string]any)
				ws, inGo := wp[p].(map[string]any)
				switch {
				case !inGo:
					out = append(out, fmt.Sprintf("%s, field %s: in api/openapi.json but not in the Go type", where, p))
				case !inDoc:
					out = append(out, fmt.Sprintf("%s, field %s: in the Go type but not in api/openapi.json", where, p))
				default:
					out = append(out, diffObject(where+", field "+p, hs, ws)...)
				}
			}
			continue
		case "allOf":
			hl, _ := h.([]any)
			wl, _ := w.([]any)
			if len(hl) == len(wl) {
				for i := range hl {
					hs, _ := hl[i].(map[string]any)
					ws, _ := wl[i].(map[string]any)
					out = append(out, diffObject(fmt.Sprintf("%s, allOf[%d]", where, i), hs, ws)...)
				}
				continue
			}
		}
		if added, removed, ok := listDiff(h, w); ok {
			msg := fmt.Sprintf("%s: %s in api/openapi.json", where, k)
			if len(added) > 0 {
				msg += " lacks " + show(added)
			}
			if len(removed) > 0 {
				msg += " has " + show(removed) + " that the Go type has not"
			}
			out = append(out, msg)
			continue
		}
		out = append(out, fmt.Sprintf("%s: %s is %s in api/openapi.json, %s from the Go type", where, k, show(h), show(w)))
	}
	return out
}

// listDiff is what the Go type's list of strings (required, enum) adds to
// the document's and what it removes, when both are lists of strings.
func listDiff(have, want any) (added, removed []string, ok bool) {
	h, ok1 := stringList(have)
	w, ok2 := stringList(want)
	if !ok1 || !ok2 {
		return nil, nil, false
	}
	for _, s := range w {
		if !slices.Contains(h, s) {
			added = append(added, s)
		}
	}
	for _, s := range h {
		if !slices.Contains(w, s) {
			removed = append(removed, s)
		}
	}
	if added == nil && removed == nil {
		return nil, nil, false // the same, in another order: show both
	}
	return added, removed, true
}

func stringList(v any) ([]string, bool) {
	l, ok := v.([]any)
	if !ok {
		return nil, false
	}
	var out []string
	for _, e := range l {
		s, ok := e.(string)
		if !ok {
			return nil, false
		}
		out = append(out, s)
	}
	return out, true
}

func show(v any) string {
	if v == nil || reflect.ValueOf(v).Kind() == reflect.Slice && reflect.ValueOf(v).Len() == 0 {
		return "absent"
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func schemasOf(doc []byte) (map[string]map[string]any, error) {
	var d struct {
		Components struct {
			Schemas map[string]map[string]any `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		return nil, err
	}
	return d.Components.Schemas, nil
}

func sortedKeys[V any](a, b map[string]V) []string {
	var keys []string
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// TestDocumentKeepsTheRest checks that Document replaces components.schemas
// and nothing else, byte for byte.
func TestDocumentKeepsTheRest(t *testing.T) {
	doc := []byte("{\n  \"openapi\": \"3.1.0\",\n  \"paths\": {\"/x\": {\"get\": {}}},\n  \"components\": {\n    \"schemas\": {\"Old\": {\"type\": \"string\"}},\n    \"responses\": {}\n  }\n}\n")
	out, err := Document(doc, Components{{Name: "New", Schema: &Schema{Type: "integer"}}})
	if err != nil {
		t.Fatal(err)
	}
	want := "{\n  \"openapi\": \"3.1.0\",\n  \"paths\": {\"/x\": {\"get\": {}}},\n  \"components\": {\n    \"schemas\": {\n      \"New\": {\n        \"type\": \"integer\"\n      }\n    },\n    \"responses\": {}\n  }\n}\n"
	if string(out) != want {
		t.Errorf("Document:\n%s\nwant:\n%s", out, want)
	}
}

// TestTags checks the rules of the schema tag on a type of its own:
// required from omitempty, nullable pointers, constraints on a list's
// items, and refusals of what the tag cannot say.
func TestTags(t *testing.T) {
	type inner struct {
		A string `json:"a"`
	}
	type probe struct {
		Plain    string    `json:"plain"`
		Omitted  string    `json:"omitted,omitempty"`
		Optional bool      `json:"optional" schema:"optional default=false"`
		Nullable *int64    `json:"nullable"`
		Absent   *int64    `json:"absent,omitempty"`
		Percents []float64 `json:"percents" schema:"exclusiveMinimum=0 maxItems=3"`
		Mode     string    `json:"mode" schema:"enum=,a,b"`
		Inner    inner     `json:"inner"`
		Skipped  string    `json:"-"`
	}
	g := &generator{names: map[reflect.Type]string{}}
	s, err := g.expand(reflect.TypeFor[probe]())
	if err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(s)
	want := `{"type":"object","required":["plain","nullable","percents","mode","inner"],"properties":{` +
		`"plain":{"type":"string"},"omitted":{"type":"string"},"optional":{"type":"boolean","default":false},` +
		`"nullable":{"type":["integer","null"],"format":"int64"},"absent":{"type":"integer","format":"int64"},` +
		`"percents":{"type":"array","maxItems":3,"items":{"type":"number","exclusiveMinimum":0}},` +
		`"mode":{"type":"string","enum":["","a","b"]},` +
		`"inner":{"type":"object","required":["a"],"properties":{"a":{"type":"string"}}}}}`
	if string(got) != want {
		t.Errorf("schema:\n%s\nwant:\n%s", got, want)
	}
	for _, bad := range []string{"nope", "enum=a enum=b", "colour=red"} {
		if _, err := parseTag(bad); err == nil {
			t.Errorf("parseTag(%q) accepted it", bad)
		}
	}
	type badMin struct {
		N int `json:"n" schema:"minimum=x"`
	}
	if _, err := g.expand(reflect.TypeFor[badMin]()); err == nil {
		t.Error("minimum=x was accepted")
	}
}
