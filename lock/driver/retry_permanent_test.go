package driver_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net"
	"testing"
	"time"

	"github.com/fencekit/fencekit/lock/driver"
)

// TestRetryableRefusesNameAndTLSFailures checks that a host name that does
// not exist and a rejected TLS handshake are permanent, as the errors of
// real handshakes on a pipe (both sides), bare, wrapped as a dial error or
// a driver would, and wrapped with Transient; and that DNS failures that may
// heal are still retried.
func TestRetryableRefusesNameAndTLSFailures(t *testing.T) {
	clientSide, serverSide := untrustedHandshake(t)
	notTLS := handshakeWithPlainServer(t)
	notFound := &net.DNSError{Err: "no such host", Name: "redis.internal", IsNotFound: true}
	cases := []struct {
		name string
		err  error
		want bool
	}{
		{"DNS no such host", notFound, false},
		{"DNS no such host in a dial error", &net.OpError{Op: "dial", Net: "tcp", Err: notFound}, false},
		{"DNS timeout", &net.DNSError{Err: "i/o timeout", Name: "redis.internal", IsTimeout: true}, true},
		{"DNS temporary server failure", &net.DNSError{Err: "server misbehaving", Name: "redis.internal", IsTemporary: true}, true},
		{"certificate from an unknown authority (this side refuses)", clientSide, false},
		{"TLS alert from the peer (the peer refuses this side)", serverSide, false},
		{"peer does not speak TLS", notTLS, false},
		{"tls.AlertError", tls.AlertError(42), false},
		{"x509.HostnameError", x509.HostnameError{Certificate: &x509.Certificate{}, Host: "db"}, false},
		{"x509.CertificateInvalidError", x509.CertificateInvalidError{Reason: x509.Expired}, false},
		{"x509.UnknownAuthorityError", x509.UnknownAuthorityError{}, false},
		{"a plain net.OpError still retried", &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset")}, true},
	}
	for _, tc := range cases {
		for _, wrap := range []struct {
			how string
			err func(error) error
		}{
			{"bare", func(err error) error { return err }},
			{"wrapped", func(err error) error { return fmt.Errorf("failed to connect to `host=db`: %w", err) }},
			{"Transient", driver.Transient},
		} {
			// A Transient mark does not make a permanent failure retryable.
			err := wrap.err(tc.err)
			if got := driver.Retryable(err); got != tc.want {
				t.Errorf("Retryable(%s, %s: %v) = %v; want %v", tc.name, wrap.how, err, got, tc.want)
			}
		}
	}
}

// untrustedHandshake runs a TLS handshake on a pipe between a server with a
// self-signed certificate and a client that does not trust it, and returns
// each side's error.
func untrustedHandshake(t *testing.T) (clientErr, serverErr error) {
	t.Helper()
	cert := selfSigned(t)
	c, s := net.Pipe()
	defer c.Close()
	defer s.Close()
	done := make(chan error, 1)
	go func() {
		srv := tls.Server(s, &tls.Config{Certificates: []tls.Certificate{cert}})
		done <- srv.Handshake()
	}()
	clientErr = tls.Client(c, &tls.Config{ServerName: "db.test"}).Handshake()
	c.Close() // the server may be waiting for more
	select {
	case serverErr = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the server side of the handshake did not return")
	}
	if clientErr == nil || serverErr == nil {
		t.Fatalf("handshake errors: client %v, server %v; want both to fail", clientErr, serverErr)
	}
	return clientErr, serverErr
}

// handshakeWithPlainServer returns the error of a TLS client whose peer
// answers in plain text, as a Redis or PostgreSQL server without TLS does.
func handshakeWithPlainServer(t *testing.T) error {
	t.Helper()
	c, s := net.Pipe()
	defer c.Close()
	defer s.Close()
	go func() {
		buf := make([]byte, 4096)
		_, _ = s.Read(buf) // the ClientHello
		_, _ = s.Write([]byte("-ERR unknown command\r\n"))
	}()
	err := tls.Client(c, &tls.Config{ServerName: "db.test"}).Handshake()
	if err == nil {
		t.Fatal("a TLS handshake with a plain-text peer succeeded")
	}
	return err
}

func selfSigned(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "db.test"},
		DNSNames:     []string{"db.test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}
