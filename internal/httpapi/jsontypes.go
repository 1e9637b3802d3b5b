package httpapi

import (
	"encoding"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"time"

	"github.com/cove-dev/cove/api"
)

// Requests are decoded into Go types, but a client reads the API: a type
// error names the field's type in the API's words (an object and its
// fields, an array of strings, an integer, a map of strings), never a Go
// type such as api.ImageAdmission, *int64 or map[string]string.

// bodyJSON is what jsonError calls a request's body.
const bodyJSON = "request body"

// jsonError is the error of a JSON document (what: "request body", or a
// query parameter's name) that did not decode: its syntax, a field of the
// wrong type, an unknown field, an early end.
func jsonError(what string, root reflect.Type, err error) error {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntax):
		return api.Errorf(api.CodeInvalidArgument, "%s is not valid JSON: %v (at byte %d)", what, err, syntax.Offset)
	case errors.As(err, &typ):
		msg := typeError(root, typ.Field, typ.Type, typ.Value)
		if what != bodyJSON {
			msg = what + ": " + msg
		}
		return api.Errorf(api.CodeInvalidArgument, "%s", msg)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		// encoding/json has no typed error for unknown fields.
		field := strings.TrimPrefix(err.Error(), "json: unknown field ")
		return api.Errorf(api.CodeInvalidArgument, "unknown field %s in %s", field, what)
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return api.Errorf(api.CodeInvalidArgument, "%s is not valid JSON: it ends too early", what)
	}
	// What is left are errors of custom decoders, which may name Go types;
	// the only ones requests reach are times'.
	var pt *time.ParseError
	if errors.As(err, &pt) {
		return api.Errorf(api.CodeInvalidArgument, "%s has a time that is not RFC 3339 (such as 2026-01-02T15:04:05Z): %s", what, pt.Value)
	}
	return api.Errorf(api.CodeInvalidArgument, "%s has a value of the wrong form", what)
}

// typeError is the message of a JSON value of the wrong type at field (a
// dotted path, "" for the whole document) of root: the field must be want,
// not got. got is what encoding/json saw ("string", "number", "number 1.5",
// "bool", "array", "object"). encoding/json names an array's or a map's
// field with the type of its items, so the field's own type is looked up.
func typeError(root reflect.Type, field string, want reflect.Type, got string) string {
	if field == "" {
		return "the JSON value must be " + jsonType(want) + ", not " + jsonValue(got)
	}
	msg := "field \"" + field + "\" must be "
	if ft := fieldType(root, field); ft != nil && ft != deref(want) {
		switch ft.Kind() {
		case reflect.Slice, reflect.Array:
			return msg + jsonType(ft) + ", not an array holding " + jsonValue(got)
		case reflect.Map:
			return msg + jsonType(ft) + ", not a map holding " + jsonValue(got)
		}
	}
	return msg + jsonType(want) + ", not " + jsonValue(got)
}

func deref(t reflect.Type) reflect.Type {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

// fieldType is the type of the field at a dotted path of JSON names in
// root, through arrays and maps of objects; nil when there is none.
func fieldType(root reflect.Type, path string) reflect.Type {
	t := deref(root)
	for name := range strings.SplitSeq(path, ".") {
		for t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array || t.Kind() == reflect.Map) {
			t = deref(t.Elem())
		}
		if t == nil || t.Kind() != reflect.Struct {
			return nil
		}
		f, ok := jsonField(t, name)
		if !ok {
			return nil
		}
		t = deref(f.Type)
	}
	return t
}

// jsonField finds the field of struct t that encoding/json decodes name
// into (exact name first, then case-insensitively, as encoding/json does).
func jsonField(t reflect.Type, name string) (reflect.StructField, bool) {
	var folded reflect.StructField
	found := false
	for _, f := range jsonFields(t) {
		n := jsonName(f)
		if n == name {
			return f, true
		}
		if !found && strings.EqualFold(n, name) {
			folded, found = f, true
		}
	}
	return folded, found
}

// jsonFields are the fields of struct t that encoding/json sees (tags,
// embedded structs, "-" left out).
func jsonFields(t reflect.Type) []reflect.StructField {
	var out []reflect.StructField
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			if ft := deref(f.Type); ft.Kind() == reflect.Struct {
				out = append(out, jsonFields(ft)...)
				continue
			}
		}
		if f.IsExported() {
			out = append(out, f)
		}
	}
	return out
}

// jsonName is the name of a field in JSON.
func jsonName(f reflect.StructField) string {
	if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name != "" {
		return name
	}
	return f.Name
}

// jsonValue names a value encoding/json saw, with its article.
func jsonValue(got string) string {
	kind, num, _ := strings.Cut(got, " ")
	switch kind {
	case "number":
		if num != "" {
			return "the number " + num // an integer field given 1.5, or out of range
		}
		return "a number"
	case "bool":
		return "a boolean"
	case "array", "object":
		return "an " + kind
	case "string":
		return "a string"
	}
	return got
}

var (
	timeType            = reflect.TypeFor[time.Time]()
	rawType             = reflect.TypeFor[json.RawMessage]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// jsonType names t as the API does, with its article: "an integer", "an
// array of strings", "an object ({mode, teams})".
func jsonType(t reflect.Type) string {
	t = deref(t)
	switch {
	case t == timeType:
		return "a string (an RFC 3339 time)"
	case t == rawType:
		return "a JSON value"
	case reflect.PointerTo(t).Implements(textUnmarshalerType):
		return "a string"
	}
	switch t.Kind() {
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return "a non-negative integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "an array of " + plural(t.Elem())
	case reflect.Map:
		return "a map of " + plural(t.Elem())
	case reflect.Struct:
		if f := fieldNames(t); f != "" {
			return "an object ({" + f + "})"
		}
		return "an object"
	case reflect.Interface:
		return "a JSON value"
	}
	return "a JSON value"
}

// plural names the elements of an array or the values of a map.
func plural(t reflect.Type) string {
	s := jsonType(t)
	switch {
	case strings.HasPrefix(s, "an object"):
		return "objects" + strings.TrimPrefix(s, "an object")
	case strings.HasPrefix(s, "an array of "), strings.HasPrefix(s, "a map of "):
		_, rest, _ := strings.Cut(s, " ")
		return rest + "s" // "arrays of strings", "maps of strings"
	}
	_, noun, _ := strings.Cut(s, " ")
	if base, paren, ok := strings.Cut(noun, " ("); ok {
		return base + "s (" + paren
	}
	return noun + "s"
}

// fieldNames lists the JSON names of a struct's fields.
func fieldNames(t reflect.Type) string {
	var names []string
	for _, f := range jsonFields(t) {
		names = append(names, jsonName(f))
	}
	return strings.Join(names, ", ")
}
