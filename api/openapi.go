package api

import _ "embed"

// OpenAPI is the OpenAPI 3.1 document of the public API, served at
// GET /v1/openapi.json. Its paths are written by hand; its
// components.schemas are generated from this package's types, their doc
// comments and schema tags (`make openapi`, internal/apischema), and a
// test fails while the two differ.
//
//go:embed openapi.json
var OpenAPI []byte
