package cli

import (
	"reflect"
	"strings"
	"testing"

	"github.com/cove-dev/cove/api"
)

func TestInjectRulesFlag(t *testing.T) {
	for _, tc := range []struct {
		flag string
		want api.InjectRule
		err  string
	}{
		{"api.openai.com=Authorization: Bearer {secret:openai}", api.InjectRule{Host: "api.openai.com", Header: "Authorization", Value: "Bearer {secret:openai}"}, ""},
		{"api.example.com:8443/v1/=X-Key: {secret:k}", api.InjectRule{Host: "api.example.com", Port: 8443, PathPrefix: "/v1/", Header: "X-Key", Value: "{secret:k}"}, ""},
		{"api.example.com", api.InjectRule{}, "must look like"},
		{"api.example.com=X-Key {secret:k}", api.InjectRule{}, "must look like"},
		{"api.example.com:x=X-Key: {secret:k}", api.InjectRule{}, "bad port"},
	} {
		got, err := injectRules([]string{tc.flag})
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q: error %v, want %q", tc.flag, err, tc.err)
		case tc.err == "" && (err != nil || !reflect.DeepEqual(got[0], tc.want)):
			t.Errorf("%q: %+v %v, want %+v", tc.flag, got, err, tc.want)
		}
	}
}
