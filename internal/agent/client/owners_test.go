package client

import (
	"io"
	"net/http"
	"testing"

	"github.com/cove-dev/cove/internal/agent/wire"
)

// TestSocketOwnersChecksTheAnswer: an agent's answer of the wrong length or
// with a malformed command ID is refused; a well-formed one passes as is.
func TestSocketOwnersChecksTheAnswer(t *testing.T) {
	socks := []wire.Socket{{Proto: "tcp", Local: "10.0.0.2:40000", Remote: "192.0.2.1:443"}, {Proto: "udp", Local: "10.0.0.2:40001"}}
	tests := []struct {
		name, answer string
		ok           bool
	}{
		{"good", `{"commands":["cmd_1",""]}`, true},
		{"too few", `{"commands":["cmd_1"]}`, false},
		{"too many", `{"commands":["cmd_1","","cmd_2"]}`, false},
		{"malformed id", `{"commands":["cmd_1","../x"]}`, false},
		{"long id", `{"commands":["cmd_1","` + string(make([]byte, 65)) + `"]}`, false},
		{"not json", `commands`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := fakeAgent(t, func(w http.ResponseWriter, r *http.Request) {
				if r.Method != http.MethodPost || r.URL.Path != "/v1/sockets/owners" {
					http.NotFound(w, r)
					return
				}
				io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "application/json")
				io.WriteString(w, tt.answer)
			})
			got, err := c.SocketOwners(t.Context(), socks)
			if tt.ok != (err == nil) {
				t.Fatalf("got %q, %v; want ok %v", got, err, tt.ok)
			}
			if tt.ok && (len(got) != 2 || got[0] != "cmd_1" || got[1] != "") {
				t.Errorf("got %q", got)
			}
		})
	}
	if _, err := fakeAgent(t, nil).SocketOwners(t.Context(), make([]wire.Socket, wire.MaxOwnerSockets+1)); err == nil {
		t.Error("an oversized request was sent")
	}
}
