package httpapi

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/cove-dev/cove/api"
)

func TestOpenAPIIsJSON31(t *testing.T) {
	var doc map[string]any
	if err := json.Unmarshal(api.OpenAPI, &doc); err != nil {
		t.Fatalf("api/openapi.json is not valid JSON: %v", err)
	}
	v, _ := doc["openapi"].(string)
	if !strings.HasPrefix(v, "3.1") {
		t.Fatalf("openapi is %q; want 3.1.x", v)
	}
}

// TestOpenAPICoversRoutes checks that every route the handler serves is in
// the document with its method.
func TestOpenAPICoversRoutes(t *testing.T) {
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(api.OpenAPI, &doc); err != nil {
		t.Fatalf("api/openapi.json is not valid JSON: %v", err)
	}
	h := New(slog.New(slog.DiscardHandler))
	h.routes()
	patterns := append([]string{"GET /v1/openapi.json"}, h.patterns...)
	n := 0
	for _, p := range patterns {
		if p == "GET /healthz" || p == "/v1/" {
			continue
		}
		method, path, ok := strings.Cut(p, " ")
		if !ok {
			t.Errorf("route %q has no method; document it or exempt it here", p)
			continue
		}
		n++
		item, ok := doc.Paths[path]
		if !ok {
			t.Errorf("route %s: path %s is missing from api/openapi.json", p, path)
			continue
		}
		if _, ok := item[strings.ToLower(method)]; !ok {
			t.Errorf("route %s: path %s has no %s operation in api/openapi.json", p, path, strings.ToLower(method))
		}
	}
	if n < 10 {
		t.Fatalf("only %d routes found; is routes() still recording its patterns?", n)
	}
}
