package remote

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// Options configure a Node. The zero value is usable.
type Options struct {
	// Logger receives the node's logs (nil: discard).
	Logger *slog.Logger
	// Codecs encode the events crossing nodes (nil: DefaultCodecs).
	Codecs *Codecs
	// Context, if set, bounds Join's wait for a NATS server that is not
	// up yet: Join waits until the server comes up or Context is done
	// (a signal), logging a WARN line every WaitWarnEvery. Nil: Join
	// waits at most 30s.
	Context context.Context
	// Watcher, if set, hears which replica admitted each event this
	// node's request-mode remote sinks sent, and which replicas are taken
	// out of rotation: what an application needs to answer at once the
	// requests a replica took with it (Haboob answers 503 to the HTTP
	// requests a dead or hung worker had admitted).
	Watcher ReplicaWatcher
}

// ReplicaWatcher hears what request-mode remote sinks learn of the
// replicas of their stages. Its methods are called on the senders'
// goroutines and must not block.
type ReplicaWatcher interface {
	// Admitted: replica inst of stage admitted e (an Enqueue's or
	// EnqueueMany's event; not a Prepare's).
	Admitted(stage, inst string, e sink.Event)
	// Out: replica inst of stage was taken out of rotation (it stopped
	// sending heartbeats, or its subject had no responders); the events
	// it admitted and has not answered for may never be handled.
	Out(stage, inst string)
}

// WaitWarnEvery is how often Join logs at WARN while it waits for the
// NATS server to come up.
const WaitWarnEvery = 5 * time.Second

// Node is this process's membership of a cluster: its NATS connection
// (and embedded server, if it runs one), the remote sinks of the stages
// other nodes host, and the replicas of the stages it hosts.
type Node struct {
	cfg     ClusterConfig
	log     *slog.Logger
	node    string // node name
	inst    string // this process, unique
	srv     *server.Server
	dir     string // temporary JetStream directory to remove
	nc      *nats.Conn
	js      nats.JetStreamContext
	wire    *Wire
	watcher ReplicaWatcher
	link    linkState

	refSeen        *dedup        // the verdicts on requests to the sinks this node exported, by idempotency key
	refSinks       atomic.Uint64 // the reference sinks imported so far (each one's keys carry its number)
	versionRefused atomic.Uint64 // messages of a newer wire version refused (VersionRefused)
	warnVersion    rateLimit

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // heartbeats, durable pullers

	mu       sync.Mutex
	m        *stage.Manager
	replicas []*replica
	durables []*durableReplica
	senders  map[string]*stageSender
	refSub   *nats.Subscription
	closed   bool
}

// Join starts this process's node: it embeds a NATS server when cfg.NATS
// is empty (listening on cfg.Listen for other processes, if set) or
// connects to cfg.NATS, waiting for it to come up. Close undoes it.
func Join(cfg ClusterConfig, o Options) (*Node, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Node == "" {
		return nil, fmt.Errorf("%w: cluster node name missing (global.cluster.node or -node)", stage.ErrInvalidConfig)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Codecs == nil {
		o.Codecs = DefaultCodecs
	}
	n := &Node{cfg: cfg, log: o.Logger.With("node", cfg.Node), node: cfg.Node, inst: nuid.Next(), senders: map[string]*stageSender{},
		watcher: o.Watcher}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.wire = newWire(n, o.Codecs, cfg.KeepTTL)
	n.refSeen = newDedup(StageConfig{}.withDefaults().Duplicates, dedupLimit, time.Now)
	opts := []nats.Option{nats.Name("sandstorm " + cfg.Node), nats.MaxReconnects(-1),
		nats.ReconnectWait(100 * time.Millisecond), nats.RetryOnFailedConnect(true),
		// No buffering while disconnected: a request sent then would
		// reach a replica after its sender was told "rejected".
		nats.ReconnectBufSize(-1),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			n.link.disconnected()
			if err != nil {
				n.log.Warn("remote: disconnected from NATS", "err", err)
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) {
			n.link.reconnected(time.Now())
			n.log.Info("remote: reconnected to NATS", "url", c.ConnectedUrl())
		}),
	}
	var token string
	if cfg.TokenFile != "" {
		tok, err := readToken(cfg.TokenFile)
		if err != nil {
			return nil, fmt.Errorf("%w: global.cluster.tokenFile: %v", stage.ErrInvalidConfig, err)
		}
		token = tok
		opts = append(opts, nats.Token(token))
	}
	var nkeyPub string
	if cfg.NKeyFile != "" {
		pub, err := readNKey(cfg.NKeyFile)
		if err != nil {
			return nil, fmt.Errorf("%w: global.cluster.nkeyFile: %v", stage.ErrInvalidConfig, err)
		}
		opt, err := nats.NkeyOptionFromSeed(cfg.NKeyFile)
		if err != nil {
			return nil, fmt.Errorf("%w: global.cluster.nkeyFile %q: no NKey seed in it", stage.ErrInvalidConfig, cfg.NKeyFile)
		}
		nkeyPub = pub
		opts = append(opts, opt)
	}
	if cfg.CredsFile != "" {
		opts = append(opts, nats.UserCredentials(cfg.CredsFile))
	}
	url := cfg.NATS
	if url == "" {
		if err := n.embed(token, nkeyPub); err != nil {
			return nil, err
		}
		// In-process: no TLS needed, but the token is.
		opts = append(opts, nats.InProcessServer(n.srv))
	} else if cfg.TLS.Enabled() {
		tc, err := clientTLS(cfg.TLS)
		if err != nil {
			return nil, err
		}
		opts = append(opts, nats.Secure(tc))
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		n.stopServer()
		return nil, fmt.Errorf("remote: connect to NATS %q: %w", url, err)
	}
	n.nc = nc
	if err := n.waitConnected(url, o.Context); err != nil {
		nc.Close()
		n.stopServer()
		return nil, err
	}
	if n.js, err = nc.JetStream(); err != nil {
		n.Close()
		return nil, fmt.Errorf("remote: JetStream: %w", err)
	}
	n.refSub, err = nc.Subscribe(n.refSubject(n.inst), n.serveRef)
	if err == nil {
		err = nc.Flush()
	}
	if err != nil {
		n.Close()
		return nil, fmt.Errorf("remote: subscribe: %w", err)
	}
	n.log.Info("remote: joined the cluster", "nats", n.URL(), "instance", n.inst)
	return n, nil
}

// waitConnected waits for the NATS connection to come up: a server not
// up yet (a worker started before the front) is waited for, the client
// reconnecting on its own, with a WARN line every WaitWarnEvery; a
// server that refuses this node (wrong token, TLS mismatch) ends the wait
// at once, and so does ctx (nil: the wait lasts at most 30s).
func (n *Node) waitConnected(url string, ctx context.Context) error {
	nc := n.nc
	limit := time.Duration(0) // none
	if ctx == nil {
		ctx, limit = context.Background(), 30*time.Second
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	start := time.Now()
	var warned time.Duration
	for !nc.IsConnected() {
		if err := nc.LastError(); refused(err) || nc.IsClosed() {
			return fmt.Errorf("remote: NATS server %q refused this node: %w", url, err)
		}
		waited := time.Since(start)
		if limit > 0 && waited >= limit {
			if err := nc.LastError(); err != nil {
				return fmt.Errorf("remote: NATS server %q not reachable within %v: %w", url, limit, err)
			}
			return fmt.Errorf("remote: NATS server %q not reachable within %v", url, limit)
		}
		if waited >= warned {
			args := []any{"url", url, "waited", waited.Round(time.Second)}
			if err := nc.LastError(); err != nil {
				args = append(args, "err", err)
			}
			n.log.Warn("remote: waiting for the NATS server", args...)
			warned += WaitWarnEvery
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return fmt.Errorf("remote: stopped while waiting for the NATS server %q: %w", url, context.Cause(ctx))
		}
	}
	return nil
}

// embed starts the embedded NATS server, requiring token or the NKey
// user nkeyPub (if not empty) from every client and speaking TLS if the
// configuration says so.
func (n *Node) embed(token, nkeyPub string) error {
	opts := &server.Options{ServerName: "sandstorm-" + n.node, JetStream: true, StoreDir: n.cfg.StoreDir, NoSigs: true, NoLog: true,
		Authorization: token}
	if nkeyPub != "" {
		opts.Nkeys = []*server.NkeyUser{{Nkey: nkeyPub}}
	}
	if t := n.cfg.TLS; t.Enabled() {
		if t.Cert == "" {
			return fmt.Errorf("%w: global.cluster.tls: the node embedding the NATS server needs cert and key", stage.ErrInvalidConfig)
		}
		tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: t.Cert, KeyFile: t.Key, CaFile: t.CA, Verify: t.CA != ""})
		if err != nil {
			return fmt.Errorf("%w: global.cluster.tls: %v", stage.ErrInvalidConfig, err)
		}
		opts.TLS, opts.TLSConfig, opts.TLSVerify, opts.TLSTimeout = true, tc, t.CA != "", 2
	}
	if n.cfg.StoreDir == "" {
		dir, err := os.MkdirTemp("", "sandstorm-nats-")
		if err != nil {
			return err
		}
		n.dir, opts.StoreDir = dir, dir
	}
	if n.cfg.Listen == "" {
		opts.DontListen = true
	} else {
		host, port, err := net.SplitHostPort(n.cfg.Listen)
		if err != nil {
			n.stopServer()
			return fmt.Errorf("remote: listen address %q: %w", n.cfg.Listen, err)
		}
		p, err := strconv.Atoi(port)
		if err != nil {
			n.stopServer()
			return fmt.Errorf("remote: listen port %q: %w", port, err)
		}
		if p == 0 {
			p = -1 // nats-server: -1 is a random port
		}
		opts.Host, opts.Port = host, p
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		n.stopServer()
		return fmt.Errorf("remote: embedded NATS server: %w", err)
	}
	n.srv = srv
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		n.stopServer()
		return errors.New("remote: embedded NATS server did not start")
	}
	return nil
}

// clientTLS is the TLS configuration of a node joining a server: it
// verifies the server against t.CA (empty: the system's roots) and
// presents t.Cert when set.
func clientTLS(t ClusterTLS) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if t.CA != "" {
		pem, err := os.ReadFile(t.CA)
		if err != nil {
			return nil, fmt.Errorf("%w: global.cluster.tls.ca: %v", stage.ErrInvalidConfig, err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: global.cluster.tls.ca: no PEM certificate in %q", stage.ErrInvalidConfig, t.CA)
		}
	}
	if t.Cert != "" {
		c, err := tls.LoadX509KeyPair(t.Cert, t.Key)
		if err != nil {
			return nil, fmt.Errorf("%w: global.cluster.tls: %v", stage.ErrInvalidConfig, err)
		}
		tc.Certificates = []tls.Certificate{c}
	}
	return tc, nil
}

// refused reports whether err is a server's refusal of this node that
// waiting will not cure: authorization, or TLS.
func refused(err error) bool {
	if err == nil {
		return false
	}
	var (
		unknown  x509.UnknownAuthorityError
		invalid  x509.CertificateInvalidError
		hostname x509.HostnameError
		alert    tls.AlertError
		verify   *tls.CertificateVerificationError
	)
	if errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) || errors.Is(err, nats.ErrAuthRevoked) ||
		errors.Is(err, nats.ErrSecureConnRequired) || errors.Is(err, nats.ErrSecureConnWanted) ||
		errors.As(err, &unknown) || errors.As(err, &invalid) || errors.As(err, &hostname) ||
		errors.As(err, &alert) || errors.As(err, &verify) {
		return true
	}
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "authorization violation") || strings.Contains(msg, "tls:") || strings.Contains(msg, "x509:")
}

func (n *Node) stopServer() {
	if n.srv != nil {
		n.srv.Shutdown()
		n.srv.WaitForShutdown()
	}
	if n.dir != "" {
		_ = os.RemoveAll(n.dir)
	}
}

// Name returns the node's name.
func (n *Node) Name() string { return n.node }

// Instance returns this process's unique identity in the cluster.
func (n *Node) Instance() string { return n.inst }

// Wire returns the node's codec context.
func (n *Node) Wire() *Wire { return n.wire }

// Conn returns the node's NATS connection.
func (n *Node) Conn() *nats.Conn { return n.nc }

// URL returns the client URL of the embedded server other processes join
// (its real port when Listen asked for port 0), or the URL this node is
// connected to.
func (n *Node) URL() string {
	if n.srv != nil {
		if n.cfg.Listen == "" {
			return "(in-process)"
		}
		return n.srv.ClientURL()
	}
	return n.nc.ConnectedUrl()
}

func (n *Node) stageSubject(stage string) string { return n.cfg.Prefix + ".s." + stage }
func (n *Node) directSubject(stage, inst string) string {
	return n.cfg.Prefix + ".s." + stage + "." + inst
}
func (n *Node) loadSubject(stage string) string    { return n.cfg.Prefix + ".load." + stage }
func (n *Node) refSubject(inst string) string      { return n.cfg.Prefix + ".ref." + inst }
func (n *Node) durableSubject(stage string) string { return n.cfg.Prefix + ".d." + stage }
func (n *Node) streamName(stage string) string {
	return strings.ToUpper(n.cfg.Prefix) + "_" + stage
}
func (n *Node) deadSubject(stage string) string { return n.cfg.Prefix + ".dlq." + stage }
func (n *Node) deadStreamName(stage string) string {
	return strings.ToUpper(n.cfg.Prefix) + "_DLQ_" + stage
}

// NewManager builds this node's manager from the whole graph's
// configuration, as stage.NewFromConfig does for one process: it creates
// the stages hosted on this node, gives every other stage a remote sink
// (Manager.SetRemoteSink), and serves the hosted stages other nodes do
// not host. Call it once, before the manager's Start.
func (n *Node) NewManager(cfg *stage.Config, r *stage.Registry, o stage.Options) (*stage.Manager, error) {
	if r == nil {
		r = stage.DefaultRegistry
	}
	local := *cfg
	local.Node = n.node
	local.Stages = append([]stage.NamedStageConfig(nil), cfg.Stages...)
	for _, ns := range local.Stages {
		if strings.ContainsAny(ns.Name, " .*>\t") {
			return nil, &stage.ConfigError{File: cfg.File, Err: fmt.Errorf("stages.%s: a stage in a cluster needs a name that is a NATS subject token", ns.Name)}
		}
	}
	r, err := n.wrapDurable(&local, r)
	if err != nil {
		return nil, err
	}
	m, err := stage.NewFromConfig(&local, r, o)
	if err != nil {
		return nil, err
	}
	n.mu.Lock()
	n.m = m
	n.mu.Unlock()
	if err := n.shareGroups(m); err != nil {
		return nil, err
	}
	for _, ns := range local.Stages {
		sc := ns.Config
		if sc.HostedOn(n.node) {
			if len(sc.Nodes) == 0 {
				continue // on every node: nobody sends to it from afar
			}
			if err := n.serve(m, ns.Name, &sc); err != nil {
				n.Shutdown(context.Background())
				return nil, err
			}
			continue
		}
		s, err := n.sinkFor(ns.Name, &sc)
		if err != nil {
			n.Shutdown(context.Background())
			return nil, err
		}
		if err := m.SetRemoteSink(ns.Name, s); err != nil {
			n.Shutdown(context.Background())
			return nil, err
		}
		registerSinkMetrics(m, ns.Name, s)
	}
	return m, nil
}

// sinkFor returns the remote sink of a stage hosted elsewhere.
func (n *Node) sinkFor(name string, sc *stage.StageConfig) (sink.Sink, error) {
	rc := StageConfigOf(sc)
	if rc.Mode == ModeDurable {
		return n.durableSink(name, sc, rc)
	}
	return n.StageSink(name, rc)
}

// Shutdown stops taking events from other nodes (the replicas'
// subscriptions drain) so that the manager's own Shutdown can drain its
// queues; the connection stays open for the replies still to send, and
// a durable replica goes on renewing the acknowledgement waits of what
// it still holds while it drains. Call Close after the manager has
// stopped.
func (n *Node) Shutdown(ctx context.Context) error {
	if n == nil {
		return nil
	}
	n.mu.Lock()
	reps, durs := n.replicas, n.durables
	n.replicas, n.durables = nil, nil
	n.mu.Unlock()
	var errs []error
	for _, r := range reps {
		errs = append(errs, r.stop())
	}
	for _, d := range durs {
		d.stop()
	}
	return errors.Join(errs...)
}

// Close stops the node: replicas, heartbeats and pullers, the NATS
// connection (flushed) and the embedded server.
func (n *Node) Close() error {
	if n == nil {
		return nil
	}
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	n.mu.Unlock()
	err := n.Shutdown(context.Background())
	n.cancel()
	n.wg.Wait()
	if n.nc != nil {
		_ = n.nc.FlushTimeout(time.Second)
		n.nc.Close()
	}
	n.stopServer()
	return err
}

// NewManager is the one call a command needs: with no `global.cluster`
// block it is stage.NewFromConfig and returns a nil Node (no NATS at
// all); with one, it joins the cluster (override, if set, adjusts the
// block first, e.g. from flags) and builds this node's manager. Call
// Node.Shutdown before the manager's and Node.Close after it (both are
// safe on a nil Node).
func NewManager(cfg *stage.Config, r *stage.Registry, so stage.Options, o Options, override func(*ClusterConfig)) (*stage.Manager, *Node, error) {
	cc, ok, err := ClusterFrom(cfg)
	if err != nil {
		return nil, nil, err
	}
	if !ok && override != nil {
		var probe ClusterConfig
		override(&probe)
		if probe != (ClusterConfig{}) {
			return nil, nil, fmt.Errorf("%w: cluster flags given but the configuration has no global.cluster block", stage.ErrInvalidConfig)
		}
	}
	if !ok {
		m, err := stage.NewFromConfig(cfg, r, so)
		return m, nil, err
	}
	if override != nil {
		override(&cc)
	}
	if o.Logger == nil {
		o.Logger = so.Logger
	}
	n, err := Join(cc, o)
	if err != nil {
		return nil, nil, err
	}
	m, err := n.NewManager(cfg, r, so)
	if err != nil {
		n.Close()
		return nil, nil, err
	}
	return m, n, nil
}
