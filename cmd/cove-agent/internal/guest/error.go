package guest

import "fmt"

// Error is a non-2xx answer of the agent: its HTTP status and the code and
// message of its wire.ErrorBody. Handlers return it; any other error they
// return is answered as internal (500, no code) and logged.
type Error struct {
	Status  int    // HTTP status
	Code    string // one of the wire.Code… constants, or "" (internal)
	Message string
	// denied: the kernel refused a file operation (EACCES, EPERM).
	denied bool
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
