package agent

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Error is a non-2xx answer of the agent: its HTTP status and the code and
// message of its ErrorBody. The server returns it from its handlers; the
// client returns it for every such answer, and the host maps Code to its own
// error codes.
type Error struct {
	Status  int    // HTTP status
	Code    string // CodeNotFound, CodeConflict, CodeInvalidArgument, or "" (internal)
	Message string
}

func (e *Error) Error() string {
	code := e.Code
	if code == "" {
		code = "internal"
	}
	return fmt.Sprintf("agent: %s (%s, status %d)", e.Message, code, e.Status)
}

func errorf(status int, code, format string, args ...any) *Error {
	return &Error{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

// ParseExit decodes and validates the data of an exit frame.
func ParseExit(data []byte) (ExitData, error) {
	var e ExitData
	if err := json.Unmarshal(data, &e); err != nil {
		return ExitData{}, fmt.Errorf("%w: exit data: %v", ErrBadFrame, err)
	}
	if e.ExitCode < -1 || e.ExitCode > 255 {
		return ExitData{}, fmt.Errorf("%w: exit code %d", ErrBadFrame, e.ExitCode)
	}
	if !validSignalName(e.Signal) {
		return ExitData{}, fmt.Errorf("%w: signal %s", ErrBadFrame, strconv.Quote(e.Signal))
	}
	return e, nil
}

// validSignalName accepts "" and short names of upper-case letters and
// digits ("KILL", "RTMIN+3" is refused; the agent reports numbers as "63").
func validSignalName(s string) bool {
	if len(s) > 16 {
		return false
	}
	return strings.IndexFunc(s, func(r rune) bool {
		return (r < 'A' || r > 'Z') && (r < '0' || r > '9')
	}) < 0
}
