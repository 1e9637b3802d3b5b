package apischema

import (
	"bytes"
	"encoding/json"
)

// Schema is one JSON Schema (OpenAPI 3.1) object. Its fields are in the
// order they are written, so the document reads the same run after run.
type Schema struct {
	Ref                  string     `json:"$ref,omitempty"`
	Type                 any        `json:"type,omitempty"` // a string, or a list of them for "null"
	Format               string     `json:"format,omitempty"`
	Description          string     `json:"description,omitempty"`
	Enum                 []any      `json:"enum,omitempty"`
	Default              any        `json:"default,omitempty"`
	Minimum              *float64   `json:"minimum,omitempty"`
	ExclusiveMinimum     *float64   `json:"exclusiveMinimum,omitempty"`
	Maximum              *float64   `json:"maximum,omitempty"`
	ExclusiveMaximum     *float64   `json:"exclusiveMaximum,omitempty"`
	MinLength            *int       `json:"minLength,omitempty"`
	MaxLength            *int       `json:"maxLength,omitempty"`
	Pattern              string     `json:"pattern,omitempty"`
	MaxItems             *int       `json:"maxItems,omitempty"`
	ContentEncoding      string     `json:"contentEncoding,omitempty"`
	ReadOnly             bool       `json:"readOnly,omitempty"`
	Items                *Schema    `json:"items,omitempty"`
	Required             []string   `json:"required,omitempty"`
	AdditionalProperties any        `json:"additionalProperties,omitempty"` // false, true or a *Schema
	Properties           Properties `json:"properties,omitempty"`
	AllOf                []*Schema  `json:"allOf,omitempty"`
	AnyOf                []*Schema  `json:"anyOf,omitempty"`
}

// Property is one named property of an object schema.
type Property struct {
	Name   string
	Schema *Schema
}

// Properties keeps an object's properties in the Go struct's field order.
type Properties []Property

// MarshalJSON writes the properties as one object, in order.
func (ps Properties) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, p := range ps {
		if i > 0 {
			b.WriteByte(',')
		}
		k, err := json.Marshal(p.Name)
		if err != nil {
			return nil, err
		}
		v, err := json.Marshal(p.Schema)
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// Components is components.schemas: every named schema, in the order of
// the table in components.go.
type Components []Property

// MarshalJSON writes the schemas as one object, in order.
func (c Components) MarshalJSON() ([]byte, error) { return Properties(c).MarshalJSON() }
