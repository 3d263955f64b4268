package driver

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"reflect"
	"syscall"
)

// ErrTransient marks a failure that a retry of the same call may cure: the
// server was unreachable, busy, loading, failing over, or aborted the call
// for a conflict. Wrap such errors with Transient: the Client retries them,
// and fails fast on anything else.
var ErrTransient = errors.New("lock: transient failure")

// transientError marks err as transient without changing its message.
type transientError struct{ err error }

func (e *transientError) Error() string        { return e.err.Error() }
func (e *transientError) Unwrap() error        { return e.err }
func (e *transientError) Is(target error) bool { return target == ErrTransient }

// Transient returns an error that matches both err and ErrTransient, with
// err's message. It returns nil for a nil err. Backends use it for server
// replies that mean "try again" (Redis LOADING or TRYAGAIN, a PostgreSQL
// serialization failure), which Retryable cannot recognise on its own.
func Transient(err error) error {
	if err == nil || errors.Is(err, ErrTransient) {
		return err
	}
	return &transientError{err: err}
}

// Retryable reports whether the Client tries again after a call failed
// with err. It is the one place where fencekit decides that, so every
// Backend's errors are judged alike:
//
//   - ErrHeld: yes, the holder will release or expire.
//   - ErrInvalid: no, the same input is refused again.
//   - A host name that does not resolve (a *net.DNSError with IsNotFound)
//     or a rejected TLS handshake (a certificate that does not verify, a
//     TLS alert from the peer, a peer that does not speak TLS): no, even
//     when wrapped with Transient. A typo in the address or a failed
//     authentication does not heal by itself, and under context.Background
//     it would be retried forever. A DNS failure that may be temporary (a
//     timeout, a server failure) is a net.Error like any other: yes.
//   - ErrTransient (see Transient), a net.Error, a refused, reset or broken
//     connection, an unexpected EOF, or a deadline that ended one attempt:
//     yes. Other system errors (syscall.Errno) only when the errno says it
//     is temporary (EAGAIN, EINTR, EMFILE): not EACCES or ENOENT.
//   - Anything else (a missing table, a failed authentication, a wrong key
//     type, a script error, token exhaustion): no. Retrying it would only
//     repeat it until the caller's context ends, which for
//     context.Background is never.
func Retryable(err error) bool {
	switch {
	case err == nil:
		return false
	case errors.Is(err, ErrInvalid):
		return false
	case hostNotFound(err), tlsRejected(err):
		return false
	case errors.Is(err, ErrHeld), errors.Is(err, ErrTransient):
		return true
	case errors.Is(err, context.DeadlineExceeded):
		// A timeout of one attempt (the caller's own context is checked
		// separately, and ends the loop when it is done).
		return true
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed):
		return true
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.ECONNABORTED), errors.Is(err, syscall.EPIPE),
		errors.Is(err, syscall.ETIMEDOUT), errors.Is(err, syscall.EHOSTUNREACH),
		errors.Is(err, syscall.ENETUNREACH):
		return true
	}
	// A bare errno satisfies net.Error too, but most (EACCES, ENOENT) will
	// not heal: trust its own judgement instead (EAGAIN, EINTR and EMFILE
	// are temporary).
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno.Temporary() || errno.Timeout()
	}
	var ne net.Error
	return errors.As(err, &ne)
}

// hostNotFound reports whether err says that a host name does not exist.
func hostNotFound(err error) bool {
	var dns *net.DNSError
	return errors.As(err, &dns) && dns.IsNotFound
}

// tlsRejected reports whether err is a TLS handshake that failed for good:
// this side refused the peer's certificate, the peer refused this side (a
// TLS alert), or the peer does not speak TLS at all.
func tlsRejected(err error) bool {
	var (
		verify   *tls.CertificateVerificationError
		alert    tls.AlertError
		header   tls.RecordHeaderError
		unknown  x509.UnknownAuthorityError
		invalid  x509.CertificateInvalidError
		hostname x509.HostnameError
		op       *net.OpError
	)
	switch {
	case errors.As(err, &verify), errors.As(err, &alert), errors.As(err, &header),
		errors.As(err, &unknown), errors.As(err, &invalid), errors.As(err, &hostname):
		return true
	case errors.As(err, &op) && op.Op == "remote error" && op.Err != nil:
		// crypto/tls reports an alert received from the peer (bad
		// certificate, unknown CA, protocol version) as a *net.OpError
		// with Op "remote error" around a value of its unexported alert
		// type, which matches no exported one.
		return reflect.TypeOf(op.Err).PkgPath() == "crypto/tls"
	}
	return false
}
