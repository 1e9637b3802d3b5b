package httpapi

import (
	"encoding/json"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
)

// requestTypes are the types every handler decodes a request body (or the
// settings query parameter) into.
var requestTypes = []any{
	api.CreateSandboxRequest{}, api.UpdateSandboxRequest{}, api.CreateCommandRequest{},
	struct {
		Signal string `json:"signal"`
	}{}, // POST …/signal
	api.EditFileRequest{}, api.MkdirRequest{}, api.MoveRequest{},
	api.SaveAssetRequest{}, api.ImageSettings{}, api.CreatePreviewRequest{},
	api.CreateTeamRequest{}, api.UpdateTeamRequest{}, api.PutSecretRequest{},
	api.CreateTicketRequest{}, api.CreateWebhookRequest{}, api.CreateWorkloadRequest{},
}

// goWords are what a message names only when it speaks Go.
var goWords = []string{"api.", "*", "[]", "map[", "int64", "int", "float64", "struct", "interface", "uint", "Go "}

// wrongCase is one wrong-typed document and the field it is wrong at.
type wrongCase struct {
	field string // dotted path, as the message names it
	doc   any    // the JSON document
	want  string // what the message must say the field is
}

// wrongValue is a JSON value of another type than t takes.
func wrongValue(t reflect.Type) any {
	if deref(t).Kind() == reflect.String {
		return 7
	}
	// A type that is also, in short, a string (api.SecretRef).
	if _, ok := reflect.Zero(deref(t)).Interface().(interface{ ShortForm() string }); ok {
		return 7
	}
	return "seven"
}

// wrongCases builds, for each field of t (and the fields, items and values
// within), a document with a value of the wrong type there.
func wrongCases(t reflect.Type, path string, wrap func(any) any, depth int) []wrongCase {
	t = deref(t)
	var out []wrongCase
	if depth > 4 || t.Kind() != reflect.Struct {
		return nil
	}
	for _, f := range jsonFields(t) {
		name := jsonName(f)
		p := name
		if path != "" {
			p = path + "." + name
		}
		at := func(v any) any { return wrap(map[string]any{name: v}) }
		ft := deref(f.Type)
		out = append(out, wrongCase{p, at(wrongValue(ft)), jsonType(ft)})
		switch ft.Kind() {
		case reflect.Slice:
			et := deref(ft.Elem())
			if et.Kind() == reflect.Struct {
				out = append(out, wrongCases(et, p, func(v any) any { return at([]any{v}) }, depth+1)...)
			} else {
				out = append(out, wrongCase{p, at([]any{wrongValue(et)}), jsonType(ft)})
			}
		case reflect.Map:
			out = append(out, wrongCase{p, at(map[string]any{"k": wrongValue(ft.Elem())}), jsonType(ft)})
		case reflect.Struct:
			out = append(out, wrongCases(ft, p, at, depth+1)...)
		}
	}
	return out
}

// TestTypeErrorsSpeakJSON: a value of the wrong type at any field of any
// request, at any depth, is refused with a message that names the field and
// its type in the API's words, never a Go type.
func TestTypeErrorsSpeakJSON(t *testing.T) {
	for _, v := range requestTypes {
		rt := reflect.TypeOf(v)
		cases := wrongCases(rt, "", func(v any) any { return v }, 0)
		if len(cases) == 0 {
			t.Fatalf("%v: no cases", rt)
		}
		for _, c := range cases {
			body, err := json.Marshal(c.doc)
			if err != nil {
				t.Fatal(err)
			}
			t.Run(rt.Name()+"/"+string(body), func(t *testing.T) {
				r := httptest.NewRequest("POST", "/", strings.NewReader(string(body)))
				err := decode(r, reflect.New(rt).Interface(), false)
				if api.ErrorCode(err) != api.CodeInvalidArgument {
					t.Fatalf("decode: %v, want invalid_argument", err)
				}
				msg := api.ErrorMessage(err)
				if want := `field "` + c.field + `" must be ` + c.want + ", not "; !strings.HasPrefix(msg, want) {
					t.Errorf("message %q, want it to start %q", msg, want)
				}
				for _, w := range goWords {
					if strings.Contains(strings.ReplaceAll(msg, "integer", ""), w) {
						t.Errorf("message %q names Go (%q)", msg, w)
					}
				}
			})
		}
	}
}

// TestTypeErrorMessages: the words, for each kind of field.
func TestTypeErrorMessages(t *testing.T) {
	tests := []struct {
		name string
		v    any
		body string
		want string
	}{
		{"object", &api.ImageSettings{}, `{"admission":"all"}`, `field "admission" must be an object ({mode, teams}), not a string`},
		{"integer", &api.CreateCommandRequest{}, `{"timeout_s":"10"}`, `field "timeout_s" must be an integer, not a string`},
		{"fraction for an integer", &api.CreateCommandRequest{}, `{"timeout_s":1.5}`, `field "timeout_s" must be an integer, not the number 1.5`},
		{"number", &api.UpdateTeamRequest{}, `{"spend_limit_usd":true}`, `field "spend_limit_usd" must be a number, not a boolean`},
		{"boolean", &api.MoveRequest{}, `{"overwrite":"yes"}`, `field "overwrite" must be a boolean, not a string`},
		{"string", &api.PutSecretRequest{}, `{"value":1}`, `field "value" must be a string, not a number`},
		{"array of strings", &api.CreateCommandRequest{}, `{"argv":"ls -l"}`, `field "argv" must be an array of strings, not a string`},
		{"item of an array", &api.CreateCommandRequest{}, `{"argv":["ls",1]}`, `field "argv" must be an array of strings, not an array holding a number`},
		{"array of numbers", &api.UpdateTeamRequest{}, `{"budget_alerts":{}}`, `field "budget_alerts" must be an array of numbers, not an object`},
		{"map of strings", &api.CreateSandboxRequest{}, `{"env":["A=1"]}`, `field "env" must be a map of strings, not an array`},
		{"value of a map", &api.CreateSandboxRequest{}, `{"labels":{"a":1}}`, `field "labels" must be a map of strings, not a map holding a number`},
		{"nested", &api.CreateSandboxRequest{}, `{"resources":{"cpus":"2"}}`, `field "resources.cpus" must be a number, not a string`},
		{"in an array of objects", &api.EditFileRequest{}, `{"edits":[{"old":"a","new":2}]}`, `field "edits.new" must be a string, not a number`},
		{"array of objects", &api.EditFileRequest{}, `{"edits":"x"}`, `field "edits" must be an array of objects ({old, new}), not a string`},
		{"whole body", &api.MkdirRequest{}, `["x"]`, `the JSON value must be an object ({path}), not an array`},
		{"time", &struct {
			At time.Time `json:"at"`
		}{}, `{"at":"yesterday"}`, `request body has a time that is not RFC 3339 (such as 2026-01-02T15:04:05Z): yesterday`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := decode(httptest.NewRequest("POST", "/", strings.NewReader(tt.body)), tt.v, false)
			if got := api.ErrorMessage(err); got != tt.want {
				t.Errorf("%s: %q, want %q", tt.body, got, tt.want)
			}
		})
	}
}
