package apischema

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Document returns doc, an OpenAPI document, with its components.schemas
// replaced by schemas; everything else (paths, parameters, responses) is
// kept byte for byte. The schemas are indented as the rest of doc: two
// spaces a level.
func Document(doc []byte, schemas Components) ([]byte, error) {
	start, end, err := schemasSpan(doc)
	if err != nil {
		return nil, err
	}
	raw, err := json.Marshal(schemas)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	out.Write(doc[:start])
	// components.schemas sits two levels deep.
	if err := json.Indent(&out, raw, "    ", "  "); err != nil {
		return nil, err
	}
	out.Write(doc[end:])
	return out.Bytes(), nil
}

// schemasSpan is where the value of components.schemas is in doc.
func schemasSpan(doc []byte) (start, end int, err error) {
	cs, ce, err := valueSpan(doc, "components")
	if err != nil {
		return 0, 0, err
	}
	ss, se, err := valueSpan(doc[cs:ce], "schemas")
	if err != nil {
		return 0, 0, fmt.Errorf("components: %w", err)
	}
	return cs + ss, cs + se, nil
}

// valueSpan is where the value of key is in obj, a JSON object.
func valueSpan(obj []byte, key string) (start, end int, err error) {
	dec := json.NewDecoder(bytes.NewReader(obj))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return 0, 0, fmt.Errorf("not a JSON object")
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return 0, 0, err
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return 0, 0, err
		}
		if tok == key {
			end := int(dec.InputOffset())
			return end - len(v), end, nil
		}
	}
	return 0, 0, fmt.Errorf("no %q", key)
}
