package api

import _ "embed"

// OpenAPI is the OpenAPI 3.1 document of the public API, served at
// GET /v1/openapi.json.
//
//go:embed openapi.json
var OpenAPI []byte
