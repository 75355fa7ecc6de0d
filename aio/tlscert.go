package aio

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// ErrNoCertificate is wrapped when a CertStore has no certificate to offer.
var ErrNoCertificate = errors.New("aio: no TLS certificate")

// CertFiles names a PEM certificate chain and its private key.
type CertFiles struct {
	Cert string `yaml:"cert"`
	Key  string `yaml:"key"`
}

// CertStore holds the certificates a TLS server offers, chosen by the
// client's server name (SNI), and reloads them from their files on demand
// (Reload, for instance on SIGHUP) without dropping connections: a
// handshake in progress keeps the certificate it was given, later
// handshakes get the new one.
//
// The first certificate is the default, offered when the client sends no
// server name or one that no certificate covers.
type CertStore struct {
	files []CertFiles // nil for a store made from certificates in memory
	mu    sync.Mutex  // serializes Reload
	set   atomic.Pointer[certSet]
}

type certSet struct {
	certs  []*tls.Certificate
	byName map[string]*tls.Certificate // exact DNS name or "*.suffix"
}

// NewCertStore loads every pair; it fails if any pair does not load.
func NewCertStore(pairs ...CertFiles) (*CertStore, error) {
	if len(pairs) == 0 {
		return nil, fmt.Errorf("%w: no certificate files given", ErrNoCertificate)
	}
	s := &CertStore{files: append([]CertFiles(nil), pairs...)}
	if err := s.Reload(); err != nil {
		return nil, err
	}
	return s, nil
}

// NewCertStoreFrom serves certificates already in memory (Reload is then a
// no-op).
func NewCertStoreFrom(certs ...tls.Certificate) (*CertStore, error) {
	if len(certs) == 0 {
		return nil, fmt.Errorf("%w: no certificate given", ErrNoCertificate)
	}
	ptrs := make([]*tls.Certificate, len(certs))
	for i := range certs {
		c := certs[i]
		ptrs[i] = &c
	}
	set, err := newCertSet(ptrs)
	if err != nil {
		return nil, err
	}
	s := &CertStore{}
	s.set.Store(set)
	return s, nil
}

// Reload reads every certificate and key file again. On any error the
// store keeps serving what it had and returns the error (which names the
// file).
func (s *CertStore) Reload() error {
	if s.files == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	certs := make([]*tls.Certificate, 0, len(s.files))
	for _, f := range s.files {
		c, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			return fmt.Errorf("aio: TLS certificate %s (key %s): %w", f.Cert, f.Key, err)
		}
		certs = append(certs, &c)
	}
	set, err := newCertSet(certs)
	if err != nil {
		return err
	}
	s.set.Store(set)
	return nil
}

func newCertSet(certs []*tls.Certificate) (*certSet, error) {
	set := &certSet{certs: certs, byName: make(map[string]*tls.Certificate)}
	for _, c := range certs {
		if c.Leaf == nil {
			if len(c.Certificate) == 0 {
				return nil, fmt.Errorf("%w: empty certificate chain", ErrNoCertificate)
			}
			leaf, err := x509.ParseCertificate(c.Certificate[0])
			if err != nil {
				return nil, fmt.Errorf("aio: TLS certificate: %w", err)
			}
			c.Leaf = leaf
		}
		names := c.Leaf.DNSNames
		if len(names) == 0 && c.Leaf.Subject.CommonName != "" {
			names = []string{c.Leaf.Subject.CommonName}
		}
		for _, n := range names {
			n = strings.ToLower(n)
			if _, dup := set.byName[n]; !dup { // the first certificate naming a host wins
				set.byName[n] = c
			}
		}
	}
	return set, nil
}

// Certificates returns the certificates now served, the default first.
func (s *CertStore) Certificates() []*tls.Certificate {
	return append([]*tls.Certificate(nil), s.set.Load().certs...)
}

// GetCertificate picks the certificate for a ClientHello: the one naming
// the server name exactly, else a wildcard for its parent domain, else the
// default. It is meant for tls.Config.GetCertificate.
func (s *CertStore) GetCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	set := s.set.Load()
	name := strings.ToLower(strings.TrimSuffix(hello.ServerName, "."))
	if name != "" {
		if c, ok := set.byName[name]; ok {
			return c, nil
		}
		if i := strings.IndexByte(name, '.'); i > 0 {
			if c, ok := set.byName["*"+name[i:]]; ok {
				return c, nil
			}
		}
	}
	return set.certs[0], nil
}

// Fingerprint is the SHA-256 of a certificate's DER encoding, in hex
// pairs separated by colons (as browsers and openssl show it).
func Fingerprint(der []byte) string {
	sum := sha256.Sum256(der)
	h := strings.ToUpper(hex.EncodeToString(sum[:]))
	var b strings.Builder
	for i := 0; i < len(h); i += 2 {
		if i > 0 {
			b.WriteByte(':')
		}
		b.WriteString(h[i : i+2])
	}
	return b.String()
}

// SelfSigned makes an ECDSA P-256 certificate for hosts (DNS names or IP
// addresses; none: "localhost", 127.0.0.1 and ::1), valid from an hour ago
// for validFor (0 → 30 days). It is for trying TLS out and for tests,
// never for production: no client trusts it unless told to.
func SelfSigned(validFor time.Duration, hosts ...string) (tls.Certificate, error) {
	if len(hosts) == 0 {
		hosts = []string{"localhost", "127.0.0.1", "::1"}
	}
	if validFor <= 0 {
		validFor = 30 * 24 * time.Hour
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return tls.Certificate{}, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: hosts[0], Organization: []string{"Sandstorm for Go (self-signed)"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(validFor),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}
