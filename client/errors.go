package client

import (
	"errors"
	"fmt"

	"github.com/rollcall/rollcall/protocol"
)

// Error is an error line from the gateway: a refused request, or the reason
// a connection was closed.
type Error struct {
	// Code is the error's code (docs/protocol.md#errors). Unknown codes
	// are possible: the protocol adds codes compatibly.
	Code    protocol.ErrorCode
	Message string
	// Gateways are the other gateways' client addresses a shutting_down
	// error carries.
	Gateways []string
}

func (e *Error) Error() string { return fmt.Sprintf("rollcall: %s: %s", e.Code, e.Message) }

// Is makes errors.Is(err, &Error{Code: c}) match any Error with code c.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code && t.Message == ""
}

// HasCode reports whether err is (or wraps) an Error with the given code.
func HasCode(err error, code protocol.ErrorCode) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

var (
	// ErrClosed is returned by calls on a Client after Close, or after the
	// client stopped (see Client.Err).
	ErrClosed = errors.New("rollcall: client closed")
	// ErrConnectionLost is returned by Send when the connection broke
	// before the gateway replied: the message may or may not have been
	// delivered, so it is not sent again.
	ErrConnectionLost = errors.New("rollcall: connection lost before the reply")
)

// fatalAtHello reports whether a refused hello should not be retried as it
// is: the configuration or the token is wrong.
func fatalAtHello(err error) bool {
	var e *Error
	if !errors.As(err, &e) {
		return false
	}
	switch e.Code {
	case protocol.CodeAuthFailed, protocol.CodeBadRequest, protocol.CodeForbidden, protocol.CodeEpochExhausted, protocol.CodeTooManySessions:
		return true
	}
	return false
}
