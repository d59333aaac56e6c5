package protocol

import "fmt"

// Code is a stable, append-only error code. Clients branch on it, never on
// the message.
type Code string

// The error codes of protocol version 1.
const (
	CodeBadRequest       Code = "bad_request"
	CodeFrameTooLarge    Code = "frame_too_large"
	CodeUnknownOp        Code = "unknown_op"
	CodeUnsupported      Code = "unsupported"
	CodeInvalidArgument  Code = "invalid_argument"
	CodeNotFound         Code = "not_found"
	CodeConflict         Code = "conflict"
	CodeLeaseExpired     Code = "lease_expired"
	CodeUnavailable      Code = "unavailable"
	CodeSpoolFull        Code = "spool_full"
	CodeDraining         Code = "draining"
	CodeOverloaded       Code = "overloaded"
	CodeDeadlineExceeded Code = "deadline_exceeded"
	CodeUnauthorized     Code = "unauthorized"
	CodeInternal         Code = "internal"
	// CodeKeyMissing: an encryption key this sidecar was not given is
	// needed (revision 1.1).
	CodeKeyMissing Code = "key_missing"
	// CodePermissionDenied: the sidecar's database role lacks a privilege
	// the call needs (revision 1.3). Retrying cannot help until it is
	// granted.
	CodePermissionDenied Code = "permission_denied"
	// CodeForbidden: the sidecar's database role was not granted the
	// right the call needs on its queue (revision 1.4). Retrying cannot
	// help until it is granted.
	CodeForbidden Code = "forbidden"
)

// retryable lists the codes a client may retry unchanged.
var retryable = map[Code]bool{
	CodeUnavailable:      true,
	CodeSpoolFull:        true,
	CodeDraining:         true,
	CodeOverloaded:       true,
	CodeDeadlineExceeded: true,
	CodeInternal:         true,
}

// Retryable reports whether a request that failed with c may be retried.
func (c Code) Retryable() bool { return retryable[c] }

// Codes lists every code, in the order of the contract's table.
func Codes() []Code {
	return []Code{
		CodeBadRequest, CodeFrameTooLarge, CodeUnknownOp, CodeUnsupported,
		CodeInvalidArgument, CodeNotFound, CodeConflict, CodeLeaseExpired,
		CodeUnavailable, CodeSpoolFull, CodeDraining, CodeOverloaded,
		CodeDeadlineExceeded, CodeUnauthorized, CodeInternal, CodeKeyMissing,
		CodePermissionDenied, CodeForbidden,
	}
}

// Error is the error object of a response, and the Go error that carries it.
type Error struct {
	Code      Code           `msgpack:"code"`
	Message   string         `msgpack:"message"`
	Retryable bool           `msgpack:"retryable"`
	Details   map[string]any `msgpack:"details,omitempty"`
}

// Errorf builds an Error with the retryability the code prescribes.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...), Retryable: code.Retryable()}
}

func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

// Is lets errors.Is match any *Error with the same code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}
