package aio_test

import (
	"crypto/tls"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandstorm-go/sandstorm/aio"
)

func writePair(t *testing.T, dir, name string, hosts ...string) aio.CertFiles {
	t.Helper()
	c, err := aio.SelfSigned(0, hosts...)
	if err != nil {
		t.Fatal(err)
	}
	f := aio.CertFiles{Cert: filepath.Join(dir, name+".crt"), Key: filepath.Join(dir, name+".key")}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Certificate[0]})
	keyDER, err := x509MarshalKey(c)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	if err := os.WriteFile(f.Cert, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.Key, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestCertStoreSNI(t *testing.T) {
	dir := t.TempDir()
	def := writePair(t, dir, "default", "localhost")
	other := writePair(t, dir, "other", "other.test", "*.wild.test")
	s, err := aio.NewCertStore(def, other)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ sni, want string }{
		{"", "localhost"},
		{"localhost", "localhost"},
		{"OTHER.test", "other.test"},
		{"a.wild.test", "other.test"},
		{"a.b.wild.test", "localhost"}, // a wildcard covers one label only
		{"unknown.test", "localhost"},
	} {
		c, err := s.GetCertificate(&tls.ClientHelloInfo{ServerName: tc.sni})
		if err != nil {
			t.Fatal(err)
		}
		if got := c.Leaf.DNSNames[0]; got != tc.want {
			t.Errorf("SNI %q: got certificate for %q, want %q", tc.sni, got, tc.want)
		}
	}
}

func TestCertStoreReload(t *testing.T) {
	dir := t.TempDir()
	f := writePair(t, dir, "site", "localhost")
	s, err := aio.NewCertStore(f)
	if err != nil {
		t.Fatal(err)
	}
	before := aio.Fingerprint(s.Certificates()[0].Certificate[0])
	writePair(t, dir, "site", "localhost") // a renewed certificate in the same files
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	after := aio.Fingerprint(s.Certificates()[0].Certificate[0])
	if before == after {
		t.Fatal("Reload kept the old certificate")
	}
	if err := os.WriteFile(f.Key, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	err = s.Reload()
	if err == nil || !strings.Contains(err.Error(), f.Cert) {
		t.Fatalf("Reload of a broken key = %v; want an error naming %s", err, f.Cert)
	}
	if got := aio.Fingerprint(s.Certificates()[0].Certificate[0]); got != after {
		t.Fatal("a failed Reload replaced the certificate")
	}
}

func TestFingerprintFormat(t *testing.T) {
	fp := aio.Fingerprint([]byte("x"))
	if len(fp) != 32*3-1 || strings.Count(fp, ":") != 31 || strings.ToUpper(fp) != fp {
		t.Fatalf("Fingerprint = %q; want 32 upper-case hex pairs joined by colons", fp)
	}
}
