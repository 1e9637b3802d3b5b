package gitsource_test

import (
	"testing"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/gitsource"
)

// TestCheck: an http(s) URL naming a host, without credentials, query or
// fragment, a ref that cannot be taken for an option and a depth in range
// pass; anything else is refused as invalid_argument.
func TestCheck(t *testing.T) {
	ok := api.Source{Type: api.SourceGit, URL: "https://example.com/o/r.git", Ref: "main", Depth: 1}
	if got, err := gitsource.Check(ok); err != nil || got.URL != ok.URL {
		t.Fatalf("Check(%+v) = %+v, %v", ok, got, err)
	}
	for name, change := range map[string]func(*api.Source){
		"no url":      func(s *api.Source) { s.URL = "" },
		"scheme":      func(s *api.Source) { s.URL = "ssh://example.com/r.git" },
		"credentials": func(s *api.Source) { s.URL = "https://u:p@example.com/r.git" },
		"address":     func(s *api.Source) { s.URL = "https://10.0.0.1/r.git" },
		"query":       func(s *api.Source) { s.URL = "https://example.com/r.git?x=1" },
		"option ref":  func(s *api.Source) { s.Ref = "-c" },
		"dotdot ref":  func(s *api.Source) { s.Ref = "a..b" },
		"depth":       func(s *api.Source) { s.Depth = -1 },
		"asset id":    func(s *api.Source) { s.AssetID = "ast_1" },
	} {
		src := ok
		change(&src)
		if _, err := gitsource.Check(src); api.ErrorCode(err) != api.CodeInvalidArgument {
			t.Errorf("%s: %v, want invalid_argument", name, err)
		}
	}
}
