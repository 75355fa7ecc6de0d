package remote_test

import (
	"crypto/tls"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sandstorm-go/sandstorm/internal/testpki"
	"github.com/sandstorm-go/sandstorm/remote"
	"github.com/sandstorm-go/sandstorm/stage"
)

const secureGraph = `
global:
  cluster: {node: a}
stages:
  Work:
    handler: t.Work
    nodes: [b]
    remote: {mode: request, timeout: 2s}
`

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// plainConnect connects a bare nats.go client, with no retry.
func plainConnect(url string, o ...nats.Option) error {
	nc, err := nats.Connect(url, append(o, nats.Timeout(2*time.Second), nats.MaxReconnects(0))...)
	if err != nil {
		return err
	}
	defer nc.Close()
	return nc.Flush()
}

// securedPair starts node a (embedding the server) and node b hosting
// Work, both with tune applied, checks that an event crosses from a to b,
// and returns the server's URL.
func securedPair(t *testing.T, tune func(*remote.ClusterConfig)) string {
	t.Helper()
	c := &cluster{t: t, tune: tune}
	ma, na := c.node(secureGraph, "a", nil)
	work := &recorder{}
	_, _ = c.node(secureGraph, "b", map[string]stage.Handler{"Work": work})
	if err := remoteSink(t, ma, "Work").Enqueue("x"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the event handled on b", func() bool { return work.count() == 1 })
	return na.URL()
}

func TestTokenRequiredAndPresented(t *testing.T) {
	const secret = "s3cret-t0ken"
	file := writeFile(t, "token", "\n  "+secret+"  \n")
	url := securedPair(t, func(cc *remote.ClusterConfig) { cc.TokenFile = file })
	if err := plainConnect(url); err == nil || !strings.Contains(strings.ToLower(err.Error()), "authorization") {
		t.Fatalf("a client without the token: %v, want an authorization violation", err)
	}
	if err := plainConnect(url, nats.Token("wrong")); err == nil {
		t.Fatal("a client with a wrong token was let in")
	}
	if err := plainConnect(url, nats.Token(secret)); err != nil {
		t.Fatalf("a client with the token: %v", err)
	}

	// A node with the wrong token is refused at once, and the error does
	// not carry either token.
	bad := writeFile(t, "bad", "not-the-token")
	start := time.Now()
	_, err := remote.Join(remote.ClusterConfig{Node: "c", NATS: url, TokenFile: bad}, remote.Options{})
	if err == nil {
		t.Fatal("a node with the wrong token joined")
	}
	if time.Since(start) > 10*time.Second {
		t.Errorf("refusal took %v: the node waited as if the server were down", time.Since(start))
	}
	if strings.Contains(err.Error(), "not-the-token") || strings.Contains(err.Error(), secret) {
		t.Fatalf("the error shows a token: %v", err)
	}
	// A node with no token at all is refused too.
	if _, err := remote.Join(remote.ClusterConfig{Node: "c", NATS: url}, remote.Options{}); err == nil {
		t.Fatal("a node without the token joined")
	}
}

func TestTokenFileErrors(t *testing.T) {
	empty := writeFile(t, "empty", " \n\t")
	missing := filepath.Join(t.TempDir(), "nope")
	for _, file := range []string{empty, missing} {
		_, err := remote.Join(remote.ClusterConfig{Node: "a", TokenFile: file}, remote.Options{})
		if !errors.Is(err, stage.ErrInvalidConfig) || !strings.Contains(err.Error(), file) {
			t.Errorf("token file %s: %v, want a config error naming the file", file, err)
		}
	}
}

// pki is an in-test certificate authority and the PEM files it signed.
type pki struct {
	ca, cert, key string
}

// newPKI makes a CA and a certificate for 127.0.0.1 and localhost, valid
// for server and client authentication (one block serves every node).
func newPKI(t *testing.T) pki {
	t.Helper()
	ca, cert, key := testpki.Write(t, t.TempDir())
	return pki{ca: ca, cert: cert, key: key}
}

func (p pki) block() remote.ClusterTLS { return remote.ClusterTLS{Cert: p.cert, Key: p.key, CA: p.ca} }

func TestTLSMutual(t *testing.T) {
	p := newPKI(t)
	c := &cluster{t: t, tune: func(cc *remote.ClusterConfig) { cc.TLS = p.block() }}
	ma, na := c.node(secureGraph, "a", nil)
	work := &recorder{}
	_, _ = c.node(secureGraph, "b", map[string]stage.Handler{"Work": work})
	if err := remoteSink(t, ma, "Work").Enqueue("x"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the event handled on b over TLS", func() bool { return work.count() == 1 })
	url := na.URL()

	if err := plainConnect(url); err == nil {
		t.Fatal("a client without TLS was let in")
	}
	other := newPKI(t)
	if err := plainConnect(url, nats.RootCAs(other.ca), nats.ClientCert(other.cert, other.key)); err == nil {
		t.Fatal("a client trusting another CA (with that CA's certificate) was let in")
	}
	if err := plainConnect(url, nats.RootCAs(p.ca)); err == nil {
		t.Fatal("a client without a certificate was let in (mutual TLS)")
	}
	if err := plainConnect(url, nats.RootCAs(p.ca), nats.ClientCert(p.cert, p.key)); err != nil {
		t.Fatalf("a client with the CA and a certificate it signed: %v", err)
	}
	// A node of another CA is refused at once, not after the 30 s wait.
	start := time.Now()
	if _, err := remote.Join(remote.ClusterConfig{Node: "c", NATS: url, TLS: other.block()}, remote.Options{}); err == nil {
		t.Fatal("a node of another CA joined")
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("refusal took %v", d)
	}
	// And a node without TLS.
	if _, err := remote.Join(remote.ClusterConfig{Node: "c", NATS: url}, remote.Options{}); err == nil {
		t.Fatal("a node without TLS joined")
	}
}

// TestTLSServerOnly: without ca on the server no client certificate is
// asked for; a client verifying against ca gets in, one without it not.
func TestTLSServerOnly(t *testing.T) {
	p := newPKI(t)
	n, err := remote.Join(remote.ClusterConfig{Node: "a", Listen: "127.0.0.1:0", TLS: remote.ClusterTLS{Cert: p.cert, Key: p.key}}, remote.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if err := plainConnect(n.URL(), nats.RootCAs(p.ca)); err != nil {
		t.Fatalf("a client verifying the server against ca: %v", err)
	}
	if err := plainConnect(n.URL(), nats.Secure(&tls.Config{MinVersion: tls.VersionTLS12})); err == nil {
		t.Fatal("a client that cannot verify the server connected")
	}
	w, err := remote.Join(remote.ClusterConfig{Node: "b", NATS: n.URL(), TLS: remote.ClusterTLS{CA: p.ca}}, remote.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_ = w.Close()
	// The node embedding the server needs a certificate.
	if _, err := remote.Join(remote.ClusterConfig{Node: "x", TLS: remote.ClusterTLS{CA: p.ca}}, remote.Options{}); !errors.Is(err, stage.ErrInvalidConfig) {
		t.Fatalf("embedding with ca only: %v, want a config error", err)
	}
}
