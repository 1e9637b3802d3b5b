package client

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/agent/wire"
)

// maxErrorMessage bounds the message of an error taken from the agent.
const maxErrorMessage = 4 << 10

// codes maps each code the agent may send (wire.Codes) to cove's code.
var codes = map[string]api.Code{
	wire.CodeNotFound:            api.CodeNotFound,
	wire.CodeConflict:            api.CodeConflict,
	wire.CodeInvalidArgument:     api.CodeInvalidArgument,
	wire.CodeResourceExhausted:   api.CodeResourceExhausted,
	wire.CodePermissionDenied:    api.CodePermissionDenied,
	wire.CodePreconditionFailed:  api.CodePreconditionFailed,
	wire.CodeUnprocessable:       api.CodeUnprocessable,
	wire.CodeInsufficientStorage: api.CodeInsufficientStorage,
}

// asError is the one translation of an error the agent answered into
// cove's: a code of the protocol becomes the *api.Error of that code with
// the agent's message, which the user sees. Any other code, or none, is
// internal: an error without a code, so that the user sees "internal
// error" and the log gets the agent's message (the agent is untrusted; it
// cannot claim codes it has no business sending, such as unauthenticated).
func asError(code, message string) error {
	if c, ok := codes[code]; ok {
		return &api.Error{Code: c, Message: message}
	}
	if code == "" {
		return fmt.Errorf("agent: %s", message)
	}
	return fmt.Errorf("agent: %s (unknown code %q)", message, code)
}

// readError reads the error of a non-2xx answer, bounded, and translates it.
func readError(resp *http.Response) error {
	var body wire.ErrorBody
	var code, msg string
	b, _ := io.ReadAll(io.LimitReader(resp.Body, wire.MaxJSON))
	if json.Unmarshal(b, &body) == nil {
		code, msg = body.Code, body.Error
	} else {
		msg = string(b)
	}
	msg = strings.ToValidUTF8(strings.TrimSpace(msg), "?")
	if len(msg) > maxErrorMessage {
		msg = msg[:maxErrorMessage] + "…"
	}
	if msg == "" {
		msg = http.StatusText(resp.StatusCode)
	}
	return fmt.Errorf("agent answered %d: %w", resp.StatusCode, asError(code, msg))
}
