package haboob

import (
	"crypto/tls"
	"fmt"
	"net"
	"time"

	"github.com/sandstorm-go/sandstorm/aio"
	"github.com/sandstorm-go/sandstorm/http"
	"github.com/sandstorm-go/sandstorm/stage"
)

// tlsArgs are HttpRecv's `tls:` args: an HTTPS listener beside the HTTP
// one, on the same stages.
type tlsArgs struct {
	// Addr is the HTTPS listen address ("" : no HTTPS).
	Addr string `yaml:"addr"`
	// Cert and Key are the default certificate's PEM files; Certs adds
	// more, chosen by SNI. With none, a self-signed certificate for
	// localhost is made at start (for trying HTTPS out, never for
	// production) and its SHA-256 fingerprint logged.
	Cert  string          `yaml:"cert"`
	Key   string          `yaml:"key"`
	Certs []aio.CertFiles `yaml:"certs"`
	// HandshakeTimeout and Stage configure the handshake stage
	// (aio.TLSConfig).
	HandshakeTimeout time.Duration            `yaml:"handshakeTimeout"`
	Stage            aio.HandshakeStageConfig `yaml:"stage"`
	// HTTP2 false makes the listener offer only http/1.1 by ALPN; by
	// default it offers h2 first (docs/http2.md).
	HTTP2 *bool `yaml:"http2"`
}

// env is what HttpRecv's servers are plugged into: its manager and logger.
func (h *httpRecv) env() aio.Env { return aio.Env{Manager: h.m, Logger: h.log} }

// listenTLS opens the HTTPS listener if one is configured (HttpRecv's
// Init, after the HTTP listener).
func (h *httpRecv) listenTLS(c *stage.Context, base http.ServerConfig) error {
	a := h.args.TLS
	if h.srv.opts.TLSAddr != "" {
		a.Addr = h.srv.opts.TLSAddr
	}
	if h.srv.opts.TLSCert != "" || h.srv.opts.TLSKey != "" {
		a.Cert, a.Key = h.srv.opts.TLSCert, h.srv.opts.TLSKey
	}
	if a.Addr == "" {
		return nil
	}
	if (a.Cert == "") != (a.Key == "") {
		return c.ArgError(fmt.Errorf("a certificate needs both cert and key"), "tls")
	}
	var pairs []aio.CertFiles
	if a.Cert != "" {
		pairs = append(pairs, aio.CertFiles{Cert: a.Cert, Key: a.Key})
	}
	pairs = append(pairs, a.Certs...)
	var store *aio.CertStore
	var err error
	if len(pairs) > 0 {
		store, err = aio.NewCertStore(pairs...)
	} else {
		var cert tls.Certificate
		if cert, err = aio.SelfSigned(0); err == nil {
			store, err = aio.NewCertStoreFrom(cert)
			h.log.Warn("haboob: HTTPS with a self-signed certificate for localhost (for trying HTTPS out, not for production)",
				"sha256", aio.Fingerprint(cert.Certificate[0]))
		}
	}
	if err != nil {
		return c.ArgError(err, "tls")
	}
	cfg := base
	cfg.Name = base.Name + "-tls"
	cfg.Socket.Name = ""
	cfg.Socket.Addr = a.Addr
	cfg.Socket.TLS = &aio.TLSConfig{Store: store, HandshakeTimeout: a.HandshakeTimeout, Stage: a.Stage}
	cfg.HTTP2.Disable = h.srv.opts.DisableHTTP2 || a.HTTP2 != nil && !*a.HTTP2
	hs, err := http.Listen(cfg, c.Stage().Sink(), h.env())
	if err != nil {
		return err
	}
	h.srv.mu.Lock()
	h.srv.https, h.srv.certs = hs, store
	h.srv.mu.Unlock()
	h.log.Info("haboob: listening (HTTPS)", "addr", hs.Addr().String())
	return nil
}

// HTTPS returns the HTTPS server, once HttpRecv has started it with a TLS
// address.
func (s *Server) HTTPS() (*http.Server, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.https == nil {
		return nil, ErrNotStarted
	}
	return s.https, nil
}

// TLSAddr is the address of the HTTPS listener, or nil without one.
func (s *Server) TLSAddr() net.Addr {
	if h, err := s.HTTPS(); err == nil {
		return h.Addr()
	}
	return nil
}

// ReloadCertificates reads the HTTPS certificate files again (cmd/haboob
// calls it on SIGHUP): connections open stay as they are, new handshakes
// get the new certificates. On error the old ones stay in use.
func (s *Server) ReloadCertificates() error {
	s.mu.Lock()
	store := s.certs
	s.mu.Unlock()
	if store == nil {
		return nil
	}
	return store.Reload()
}
