package api

import (
	"errors"
	"fmt"
)

// Code names a class of failure. Each code maps to exactly one HTTP status
// (see internal/httpapi); clients branch on the code, never on the message.
type Code string

// The error codes of the public API (API.md "Conventions").
const (
	CodeInvalidArgument    Code = "invalid_argument"
	CodeUnauthenticated    Code = "unauthenticated"
	CodePermissionDenied   Code = "permission_denied"
	CodeNotFound           Code = "not_found"
	CodeConflict           Code = "conflict"
	CodePreconditionFailed Code = "precondition_failed"
	CodePayloadTooLarge    Code = "payload_too_large"
	CodeUnprocessable      Code = "unprocessable"
	CodeResourceExhausted  Code = "resource_exhausted"
	CodeInternal           Code = "internal"
	CodeUnavailable        Code = "unavailable"

	// CodeInsufficientStorage: no room for a write, on the sandbox's disk or
	// on the node's data disk (HTTP 507).
	CodeInsufficientStorage Code = "insufficient_storage"
	// CodeBudgetExceeded: a spend limit was reached (HTTP 402).
	CodeBudgetExceeded Code = "budget_exceeded"
)

// Values lists the codes: the enum of the OpenAPI document.
func (Code) Values() []string {
	return []string{
		string(CodeInvalidArgument), string(CodeUnauthenticated), string(CodePermissionDenied),
		string(CodeNotFound), string(CodeConflict), string(CodePreconditionFailed),
		string(CodePayloadTooLarge), string(CodeUnprocessable), string(CodeResourceExhausted),
		string(CodeInternal), string(CodeUnavailable), string(CodeInsufficientStorage),
		string(CodeBudgetExceeded),
	}
}

// Error is the one error type of cove. It is both the domain error returned by
// services and the wire form inside {"error": {...}}.
type Error struct {
	// Class of failure; each code maps to one HTTP status. Clients branch on
	// the code, never on the message.
	Code Code `json:"code"`
	// What was wrong and what to do.
	Message string `json:"message"`
	// Extra facts, e.g. field, min and max of a range error.
	Details map[string]any `json:"details,omitempty"`
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %s", e.Code, e.Message) }

// Errorf returns an *Error with the given code and a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ErrorCode returns the code of the first *Error in err's chain, or
// CodeInternal when there is none. A nil error has no code.
func ErrorCode(err error) Code {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}

// ErrorMessage returns the message a user may see: the message of a coded
// error, or "internal error" for anything else (whose detail belongs in logs).
func ErrorMessage(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Message
	}
	return "internal error"
}

// ErrorResponse is the body of every non-2xx answer.
type ErrorResponse struct {
	Error *Error `json:"error" schema:"nonnull"`
}
