package http_test

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	nethttp "net/http"
	"strconv"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/sandstorm-go/sandstorm/aio"
	"github.com/sandstorm-go/sandstorm/http"
	"github.com/sandstorm-go/sandstorm/internal/h2test"
)

// A connection sends file bodies from the descriptor over HTTP/1.1 on a
// plain socket (sendfile) and over HTTP/2 with or without TLS (pread a
// chunk at a time), but not over HTTP/1.1 with TLS, which reads the body
// into memory to encrypt it.
func TestConnectionSendsFiles(t *testing.T) {
	store, clientTLS := selfSignedTLS(t)

	tests := []struct {
		name   string
		tls    bool
		client func(t *testing.T) *nethttp.Client
		proto  string
		sends  bool
	}{
		{"HTTP/1.1", false, func(*testing.T) *nethttp.Client { return &nethttp.Client{Transport: &nethttp.Transport{}} }, "HTTP/1.1", true},
		{"HTTP/1.1 over TLS", true, func(*testing.T) *nethttp.Client {
			return &nethttp.Client{Transport: &nethttp.Transport{TLSClientConfig: clientTLS}}
		}, "HTTP/1.1", false},
		{"h2c", false, h2test.Client, "HTTP/2.0", true},
		{"h2 over TLS", true, func(*testing.T) *nethttp.Client {
			return &nethttp.Client{Transport: &http2.Transport{TLSClientConfig: clientTLS}}
		}, "HTTP/2.0", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := http.ServerConfig{}
			scheme := "http"
			if tc.tls {
				cfg.Socket.TLS = &aio.TLSConfig{Store: store}
				scheme = "https"
			}
			f := startServer(t, cfg, func(req *http.Request) {
				c, ok := req.Conn.(*http.Connection)
				sends := ok && c.SendsFiles()
				_ = http.Respond(req, http.OK("text/plain", []byte(strconv.FormatBool(sends))))
			})
			client := tc.client(t)
			client.Timeout = 30 * time.Second // hang guard
			t.Cleanup(client.CloseIdleConnections)
			resp, err := client.Get(scheme + "://" + f.addr + "/")
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			if resp.Proto != tc.proto {
				t.Fatalf("answered over %s, want %s", resp.Proto, tc.proto)
			}
			if got := string(body); got != strconv.FormatBool(tc.sends) {
				t.Fatalf("SendsFiles() = %s, want %v", got, tc.sends)
			}
		})
	}
}

// selfSignedTLS is a certificate store for a TLS server on 127.0.0.1 and
// a client configuration that trusts it.
func selfSignedTLS(t *testing.T) (*aio.CertStore, *tls.Config) {
	t.Helper()
	cert, err := aio.SelfSigned(0, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	store, err := aio.NewCertStoreFrom(cert)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(cert.Leaf)
	return store, &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"}
}
