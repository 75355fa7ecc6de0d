package testpki_test

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"testing"

	"github.com/sandstorm-go/sandstorm/internal/testpki"
)

// The node certificate loads with its key and verifies against the CA
// for 127.0.0.1 and localhost.
func TestWriteVerifies(t *testing.T) {
	ca, cert, key := testpki.Write(t, t.TempDir())
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	pemCA, err := os.ReadFile(ca)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pemCA) {
		t.Fatal("ca.pem holds no certificate")
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, host := range []string{"127.0.0.1", "localhost"} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: host, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("%s: %v", host, err)
		}
	}
}
