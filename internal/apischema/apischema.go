// Package apischema writes the components.schemas of api/openapi.json from
// the Go wire types in api/, so the two cannot drift: the Go types are the
// source, the document's schemas are generated (`make openapi`), and a test
// fails when the committed document differs from what the types say.
//
// A schema comes from a type by reflection, following encoding/json: a
// field's JSON name and omitempty from its json tag, nested types as $refs
// to their own component (components.go lists them and their names) or
// inline when they have none. Descriptions come from the doc comments in
// api's source (go/parser): a type's comment describes its schema, a
// field's comment (the lines above it, not a comment at the line's end)
// its property. What Go's types cannot say is in the field's schema tag;
// the enum values of a named string type come from its Values method.
// The rules are in docs/architecture.md ("The contract").
package apischema

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// enumerated is a named string type of api that lists its values.
type enumerated interface{ Values() []string }

// shortened is a type whose JSON may also be a string, its short form
// (api.SecretRef); ShortForm describes that string.
type shortened interface{ ShortForm() string }

// Generate returns components.schemas for the types of components.go, with
// the descriptions of the api source in apiDir.
func Generate(apiDir string) (Components, error) {
	docs, err := loadDocs(apiDir)
	if err != nil {
		return nil, err
	}
	g := &generator{docs: docs, names: map[reflect.Type]string{}}
	for _, c := range components {
		if prev, ok := g.names[c.typ]; ok {
			return nil, fmt.Errorf("%s: type %s is already component %s", c.name, c.typ, prev)
		}
		g.names[c.typ] = c.name
	}
	var out Components
	for _, c := range components {
		s, err := g.component(c)
		if err != nil {
			return nil, fmt.Errorf("schema %s (%s): %w", c.name, c.typ, err)
		}
		out = append(out, Property{Name: c.name, Schema: s})
	}
	return out, nil
}

type generator struct {
	docs  docs
	names map[reflect.Type]string // component types → their schema's name
}

// component is the full schema of a component's type.
func (g *generator) component(c component) (*Schema, error) {
	s, err := g.expand(c.typ)
	if err != nil {
		return nil, err
	}
	if c.closed {
		target := s
		if len(s.AllOf) > 0 {
			target = s.AllOf[len(s.AllOf)-1]
		}
		target.AdditionalProperties = false
	}
	// A generic type's comment is about all its instances: List's says
	// nothing of SandboxList.
	if !strings.Contains(c.typ.Name(), "[") {
		s.Description = describe(g.docs.types[c.typ.Name()], c.typ.Name())
	}
	return s, nil
}

// use is the schema of a value of type t where it is used: a $ref when t
// is a component, else t's schema inline.
func (g *generator) use(t reflect.Type) (*Schema, error) {
	if name, ok := g.names[t]; ok {
		return &Schema{Ref: "#/components/schemas/" + name}, nil
	}
	return g.expand(t)
}

var (
	timeType  = reflect.TypeFor[time.Time]()
	bytesType = reflect.TypeFor[[]byte]()
)

// expand is the schema of type t itself, never a $ref to t.
func (g *generator) expand(t reflect.Type) (*Schema, error) {
	switch {
	case t == timeType:
		return &Schema{Type: "string", Format: "date-time"}, nil
	case t == bytesType:
		return &Schema{Type: "string", ContentEncoding: "base64"}, nil
	}
	switch t.Kind() {
	case reflect.Pointer:
		return g.use(t.Elem())
	case reflect.String:
		s := &Schema{Type: "string"}
		if e, ok := reflect.Zero(t).Interface().(enumerated); ok {
			for _, v := range e.Values() {
				s.Enum = append(s.Enum, v)
			}
		}
		return s, nil
	case reflect.Bool:
		return &Schema{Type: "boolean"}, nil
	case reflect.Int64, reflect.Uint64:
		return &Schema{Type: "integer", Format: "int64"}, nil
	case reflect.Int, reflect.Int32, reflect.Int16, reflect.Int8, reflect.Uint, reflect.Uint32, reflect.Uint16, reflect.Uint8:
		return &Schema{Type: "integer"}, nil
	case reflect.Float64, reflect.Float32:
		return &Schema{Type: "number"}, nil
	case reflect.Interface:
		return &Schema{}, nil
	case reflect.Slice, reflect.Array:
		items, err := g.use(t.Elem())
		if err != nil {
			return nil, err
		}
		return &Schema{Type: "array", Items: items}, nil
	case reflect.Map:
		if t.Key().Kind() != reflect.String {
			return nil, fmt.Errorf("map key %s is not a string", t.Key())
		}
		if t.Elem().Kind() == reflect.Interface {
			return &Schema{Type: "object", AdditionalProperties: true}, nil
		}
		v, err := g.use(t.Elem())
		if err != nil {
			return nil, err
		}
		return &Schema{Type: "object", AdditionalProperties: v}, nil
	case reflect.Struct:
		o, err := g.object(t)
		if err != nil {
			return nil, err
		}
		if sf, ok := reflect.Zero(t).Interface().(shortened); ok {
			return &Schema{AnyOf: []*Schema{{Type: "string", Description: sf.ShortForm()}, o}}, nil
		}
		return o, nil
	}
	return nil, fmt.Errorf("type %s has no JSON Schema here", t)
}

// object is the schema of struct t. An embedded struct's fields are t's
// own, as encoding/json writes them, unless the embedded type is a
// component: then the schema is allOf that component and t's own fields.
func (g *generator) object(t reflect.Type) (*Schema, error) {
	s := &Schema{Type: "object"}
	var bases []*Schema
	if err := g.fields(t, s, &bases); err != nil {
		return nil, err
	}
	if len(bases) == 0 {
		return s, nil
	}
	return &Schema{AllOf: append(bases, s)}, nil
}

func (g *generator) fields(t reflect.Type, s *Schema, bases *[]*Schema) error {
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ref, ok := g.names[ft]; ok {
				*bases = append(*bases, &Schema{Ref: "#/components/schemas/" + ref})
				continue
			}
			if err := g.fields(ft, s, bases); err != nil {
				return err
			}
			continue
		}
		if name == "" {
			name = f.Name
		}
		p, required, err := g.property(t, f, strings.Contains(","+opts+",", ",omitempty,"))
		if err != nil {
			return fmt.Errorf("field %s: %w", f.Name, err)
		}
		s.Properties = append(s.Properties, Property{Name: name, Schema: p})
		if required {
			s.Required = append(s.Required, name)
		}
	}
	return nil
}

// property is the schema of field f of struct t, and whether the field is
// required: a field without omitempty is always written, so it is required
// unless its schema tag says optional (a request's field the server
// defaults).
func (g *generator) property(t reflect.Type, f reflect.StructField, omitempty bool) (*Schema, bool, error) {
	tag, err := parseTag(f.Tag.Get("schema"))
	if err != nil {
		return nil, false, err
	}
	var p *Schema
	if tag.ref != "" {
		p = &Schema{Ref: "#/components/schemas/" + tag.ref}
	} else if p, err = g.use(f.Type); err != nil {
		return nil, false, err
	}
	if err := tag.apply(p, f.Type); err != nil {
		return nil, false, err
	}
	// A pointer without omitempty is written as null when nil.
	if f.Type.Kind() == reflect.Pointer && !omitempty && !tag.nonnull || tag.nullable {
		nullable(p)
	}
	// OpenAPI 3.1 lets a description stand beside a $ref.
	p.Description = describe(g.docs.fields[typeName(t)+"."+f.Name], f.Name)
	return p, !omitempty && !tag.optional, nil
}

// nullable lets p be null too.
func nullable(p *Schema) {
	switch typ := p.Type.(type) {
	case string:
		p.Type = []string{typ, "null"}
	case nil:
		*p = Schema{AnyOf: []*Schema{{Ref: p.Ref}, {Type: "null"}}}
	}
}

// typeName is t's name without type arguments: List for List[Sandbox].
func typeName(t reflect.Type) string {
	n, _, _ := strings.Cut(t.Name(), "[")
	return n
}

// describe turns a doc comment into a description: one line, and the Go
// name it starts with dropped when a verb follows it ("Resources are what
// a sandbox reserves." → "What a sandbox reserves."; "TeamMe answers GET
// /v1/teams/me" → "Answers GET /v1/teams/me").
func describe(comment, goName string) string {
	d := strings.Join(strings.Fields(comment), " ")
	rest, ok := strings.CutPrefix(d, goName+" ")
	if !ok {
		return d
	}
	verb, after, _ := strings.Cut(rest, " ")
	switch {
	case verb == "is" || verb == "are":
		rest = after
	case verb == "and" || verb == "or" || verb == "" || !unicode.IsLower(rune(verb[0])):
		return d // "A and B are …": the name is the subject, not a word to drop
	}
	r, n := utf8.DecodeRuneInString(rest)
	return string(unicode.ToUpper(r)) + rest[n:]
}

// tag is a field's schema tag: what the Go type cannot say. Its items are
// separated by spaces: flags (optional, nullable, nonnull, readOnly) and
// key=value (enum=a,b,c; minimum, maximum, exclusiveMinimum,
// exclusiveMaximum, minLength, maxLength, maxItems, pattern, format,
// default; ref=Name for a component other than the field type's). On a
// list, the constraints of a value (enum, bounds, lengths, pattern,
// format) hold for each item.
type tag struct {
	optional, nullable, nonnull, readOnly bool
	ref                                   string
	values                                map[string]string
	order                                 []string
}

func parseTag(s string) (tag, error) {
	t := tag{values: map[string]string{}}
	for _, item := range strings.Fields(s) {
		k, v, ok := strings.Cut(item, "=")
		if !ok {
			switch k {
			case "optional":
				t.optional = true
			case "nullable":
				t.nullable = true
			case "nonnull":
				t.nonnull = true
			case "readOnly":
				t.readOnly = true
			default:
				return t, fmt.Errorf("schema tag: unknown flag %q", k)
			}
			continue
		}
		switch k {
		case "ref":
			t.ref = v
			continue
		case "enum", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
			"minLength", "maxLength", "maxItems", "pattern", "format", "default":
		default:
			return t, fmt.Errorf("schema tag: unknown key %q", k)
		}
		if _, dup := t.values[k]; dup {
			return t, fmt.Errorf("schema tag: %s twice", k)
		}
		t.values[k] = v
		t.order = append(t.order, k)
	}
	return t, nil
}

// apply writes the tag's constraints into p, the schema of a field of Go
// type ft.
func (t tag) apply(p *Schema, ft reflect.Type) error {
	p.ReadOnly = t.readOnly
	for _, k := range t.order {
		v := t.values[k]
		target := p
		if p.Type == "array" && k != "maxItems" && k != "default" {
			target = p.Items
		}
		num := func() (*float64, error) {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return nil, fmt.Errorf("schema tag: %s=%q is not a number", k, v)
			}
			return &f, nil
		}
		count := func() (*int, error) {
			n, err := strconv.Atoi(v)
			if err != nil {
				return nil, fmt.Errorf("schema tag: %s=%q is not a count", k, v)
			}
			return &n, nil
		}
		var err error
		switch k {
		case "enum":
			for _, e := range strings.Split(v, ",") {
				target.Enum = append(target.Enum, e)
			}
		case "minimum":
			target.Minimum, err = num()
		case "maximum":
			target.Maximum, err = num()
		case "exclusiveMinimum":
			target.ExclusiveMinimum, err = num()
		case "exclusiveMaximum":
			target.ExclusiveMaximum, err = num()
		case "minLength":
			target.MinLength, err = count()
		case "maxLength":
			target.MaxLength, err = count()
		case "maxItems":
			target.MaxItems, err = count()
		case "pattern":
			target.Pattern = v
		case "format":
			target.Format = v
		case "default":
			target.Default, err = defaultValue(v, ft)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// defaultValue is v as a value of Go type ft.
func defaultValue(v string, ft reflect.Type) (any, error) {
	for ft.Kind() == reflect.Pointer {
		ft = ft.Elem()
	}
	switch ft.Kind() {
	case reflect.Bool:
		return strconv.ParseBool(v)
	case reflect.Int, reflect.Int64, reflect.Int32:
		return strconv.ParseInt(v, 10, 64)
	case reflect.Float64:
		return strconv.ParseFloat(v, 64)
	case reflect.String:
		return v, nil
	}
	return nil, fmt.Errorf("schema tag: no default for a %s", ft)
}
