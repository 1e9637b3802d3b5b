// Package typeerrors tests, on a real `cove serve` and as a tenant's API
// key, that a request with a field of the wrong type is answered in the
// API's words: the message names the field and its JSON type, never the
// Go type the server decodes into.
package typeerrors

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
)

func TestMain(m *testing.M) { e2etest.Main(m) }

// goWords appear in a message only when it speaks Go.
var goWords = []string{"api.", "*", "[]", "map[", "int64", "float64", "struct"}

// TestWrongTypesAnswerInJSONWords: a wrong-typed field sent to each of
// several endpoints (and the image settings query parameter) is a 400
// that says what the field must be, in JSON terms.
func TestWrongTypesAnswerInJSONWords(t *testing.T) {
	s := e2etest.StartServer(t)
	team := s.NewTeam("typeerrors")
	key := s.Keys()[len(s.Keys())-1]
	sb := e2etest.Create(t, team, api.CreateSandboxRequest{})
	base := s.URL + "/v1"
	settings := url.QueryEscape(`{"admission":"all"}`)
	tests := []struct {
		name, method, url, body, want string
	}{
		{"create sandbox", "POST", base + "/sandboxes", `{"resources":"big"}`, `field "resources" must be an object ({cpus, memory_mib, disk_mib, gpus}), not a string`},
		{"update sandbox", "PATCH", base + "/sandboxes/" + sb.ID, `{"labels":["a"]}`, `field "labels" must be a map of strings, not an array`},
		{"exec", "POST", base + "/sandboxes/" + sb.ID + "/commands", `{"timeout_s":"10"}`, `field "timeout_s" must be an integer, not a string`},
		{"webhook", "POST", base + "/webhooks", `{"url":"https://example.invalid/h","events":"sandbox.created"}`, `field "events" must be an array of strings, not a string`},
		{"secret", "PUT", base + "/secrets/typeerrors", `{"value":1}`, `field "value" must be a string, not a number`},
		{"preview", "POST", base + "/sandboxes/" + sb.ID + "/previews", `{"port":"8000"}`, `field "port" must be an integer, not a string`},
		{"image settings", "PATCH", base + "/images/img_none", `{"admission":"all"}`, `field "admission" must be an object ({mode, teams}), not a string`},
		{"image settings parameter", "POST", base + "/images?name=x&settings=" + settings, ``, `query parameter settings: field "admission" must be an object ({mode, teams}), not a string`},
	}
	// Query parameters of the wrong type: their messages are checked for
	// Go words only.
	for _, q := range []struct{ name, url string }{
		{"limit", base + "/sandboxes?limit=ten"},
		{"wait", base + "/sandboxes/" + sb.ID + "?wait=soon"},
		{"metrics from", base + "/sandboxes/" + sb.ID + "/metrics?from=yesterday"},
		{"metrics step", base + "/sandboxes/" + sb.ID + "/metrics?step=often"},
		{"files wake", base + "/sandboxes/" + sb.ID + "/files/stat?path=/tmp&wake=maybe"},
	} {
		tests = append(tests, struct{ name, method, url, body, want string }{"query " + q.name, "GET", q.url, "", ""})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, er, body := e2etest.RawRequest(t, tt.method, tt.url, key, tt.body)
			if status != http.StatusBadRequest || er.Error.Code != api.CodeInvalidArgument {
				t.Fatalf("%s %s: %d %s, want 400 invalid_argument", tt.method, tt.url, status, body)
			}
			if tt.want != "" && er.Error.Message != tt.want {
				t.Errorf("message %q, want %q", er.Error.Message, tt.want)
			}
			for _, w := range goWords {
				if strings.Contains(er.Error.Message, w) {
					t.Errorf("message %q names Go (%q)", er.Error.Message, w)
				}
			}
		})
	}
}
