// Command haboob runs Haboob, the web server of the SEDA thesis, as a graph
// of Sandstorm stages wired in a YAML configuration (configs/haboob.yaml by
// default, embedded in the binary).
//
//	haboob [-config FILE] [-root DIR] [-addr HOST:PORT] [-profiler HOST:PORT]
//	       [-tls-addr HOST:PORT [-tls-cert FILE -tls-key FILE]] [-debug]
//	       [-node NAME] [-nats URL] [-nats-listen HOST:PORT]
//	       [-nats-token-file FILE | -nats-nkey-file FILE | -nats-creds-file FILE]
//	       [-nats-tls-cert FILE -nats-tls-key FILE] [-nats-tls-ca FILE]
//	       [-access-log PATH|- [-access-log-format combined|json]] [-otel off|stdout]
//
// With no flags it serves a small bundled site on 127.0.0.1:8080, so that
// `go run ./cmd/haboob` just works; the bundled files are extracted to a
// temporary directory (removed at exit) and served through the asynchronous
// file layer like any document root. -root serves a directory instead,
// overriding the configuration's document root (the `root` arg of its
// CacheMiss stage); the bundled site is served only when neither sets one.
// -addr overrides the listen address (port 0 picks a free port); -profiler
// overrides the profiler's dashboard address ("" turns it off). Logs go to
// stderr. The profiler's address is also the admin port: /healthz,
// /readyz (503 from the start of a shutdown, or once a root supervisor
// gave up), /config (the effective configuration, secrets redacted),
// /metrics and /debug/pprof/ (see haboob -h and package profiler).
// -access-log PATH writes one line per response (combined log format, or
// JSON lines with -access-log-format json; "-" is stderr) from a stage of
// its own (AccessLog), off the serving path: under overload lines are
// dropped and counted (accesslog.dropped on the stats page and in the
// profiler) rather than slowing responses (package http/accesslog).
// -otel stdout traces every stage visit with OpenTelemetry (package
// otelstage), spans as JSON lines on stdout; a request's W3C traceparent
// header continues the caller's trace.
// SIGHUP reloads: the HTTPS certificates are read again, and the -config
// file is applied to the running stages without closing a connection
// (changed predicates, queue thresholds, thread-pool and batching bounds
// in place; added stages start, removed ones drain; see docs/yaml.md,
// "Reloading"). A file with errors is refused whole, every error logged,
// and the running configuration stays.
// SIGINT or SIGTERM shuts down cleanly, within the configuration's
// global.shutdown: the server reads no more requests and closes the
// connections that owe no response (idle ones, half-sent requests), the
// others once their responses are sent (connections still stuck behind a
// client that does not read are closed near the end of the bound, and
// logged); then the stages drain and the profiler stops.
//
// Across processes (configs/haboob-cluster.yaml, package remote): -node
// names the node this process runs as, and it hosts only the stages whose
// `nodes:` list names it; -nats joins the NATS server at URL instead of
// embedding one, and -nats-listen is where the embedded server takes
// other processes' connections. -nats-token-file names a file holding
// the cluster's token (the embedded server requires it, every node
// presents it) — or -nats-nkey-file an NKey user seed (the server admits
// that user only), or -nats-creds-file a creds file for an external
// operator-mode server —, and -nats-tls-cert, -nats-tls-key and -nats-tls-ca make
// NATS speak TLS (see remote.ClusterTLS). The flags override
// global.cluster's node, nats, listen, tokenFile and tls.{cert,key,ca}; a
// configuration without a cluster block starts no NATS. Cluster flags without -config select the embedded
// configs/haboob-cluster.yaml.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sandstorm-go/sandstorm/apps/haboob"
	"github.com/sandstorm-go/sandstorm/configs"
	"github.com/sandstorm-go/sandstorm/http/accesslog"
	"github.com/sandstorm-go/sandstorm/profiler"
	"github.com/sandstorm-go/sandstorm/remote"
	"github.com/sandstorm-go/sandstorm/stage"
)

// optionalString is a flag that remembers whether it was given (an empty
// value is meaningful).
type optionalString struct {
	value string
	set   bool
}

func (o *optionalString) String() string { return o.value }
func (o *optionalString) Set(v string) error {
	o.value, o.set = v, true
	return nil
}

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	fs := flag.NewFlagSet("haboob", flag.ContinueOnError)
	configPath := fs.String("config", "", "stage configuration file (default: the embedded configs/haboob.yaml)")
	root := fs.String("root", "", "document root (default: the bundled site)")
	addr := fs.String("addr", "", "listen address, overriding the configuration (port 0: any free port)")
	var prof optionalString
	fs.Var(&prof, "profiler", `admin address (dashboard, /metrics, /healthz, /readyz, /config, /debug/pprof/), overriding global.profiler.http ("" turns it off)`)
	debug := fs.Bool("debug", false, "log at debug level")
	var cf clusterFlags
	fs.Var(&cf.node, "node", "cluster node name, overriding global.cluster.node")
	fs.Var(&cf.nats, "nats", `NATS server URL to join, overriding global.cluster.nats ("": embed one)`)
	fs.Var(&cf.listen, "nats-listen", "client address of the embedded NATS server, overriding global.cluster.listen")
	fs.Var(&cf.tokenFile, "nats-token-file", "file holding the cluster's NATS token (required by the embedded server, presented by every node), overriding global.cluster.tokenFile")
	fs.Var(&cf.nkeyFile, "nats-nkey-file", "file holding the cluster's NKey user seed (the embedded server admits only that user, every node signs with it), overriding global.cluster.nkeyFile")
	fs.Var(&cf.credsFile, "nats-creds-file", "NATS credentials file (user JWT and seed) for an external operator-mode server, overriding global.cluster.credsFile")
	fs.Var(&cf.natsCert, "nats-tls-cert", "NATS TLS certificate (PEM), overriding global.cluster.tls.cert")
	fs.Var(&cf.natsKey, "nats-tls-key", "NATS TLS private key (PEM), overriding global.cluster.tls.key")
	fs.Var(&cf.natsCA, "nats-tls-ca", "CA (PEM) NATS peers are verified against, overriding global.cluster.tls.ca")
	var tf tlsFlags
	fs.StringVar(&tf.addr, "tls-addr", "", "HTTPS listen address beside -addr, overriding HttpRecv's tls.addr (no certificate: a self-signed one for localhost, for trying HTTPS out)")
	fs.StringVar(&tf.cert, "tls-cert", "", "HTTPS certificate chain (PEM), overriding HttpRecv's tls.cert")
	fs.StringVar(&tf.key, "tls-key", "", "HTTPS private key (PEM), overriding HttpRecv's tls.key")
	http2 := fs.Bool("http2", true, "serve HTTP/2 (h2 by ALPN on HTTPS, h2c with prior knowledge on HTTP); -http2=false: HTTP/1.1 only")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage of haboob:\n")
		fs.PrintDefaults()
		fmt.Fprint(fs.Output(), adminHelp)
	}
	fs.StringVar(&cf.access.path, "access-log", "", `access log file, one line per response ("-": stderr; default: none)`)
	fs.StringVar(&cf.access.format, "access-log-format", "combined", "access log format: combined or json (JSON lines through slog)")
	fs.StringVar(&cf.otel, "otel", "off", otelHelp)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	tf.noHTTP2 = !*http2
	if _, err := newTracing(cf.otel, io.Discard); err != nil {
		fmt.Fprintln(os.Stderr, "haboob:", err)
		return 2
	}
	if _, err := accesslog.ParseFormat(cf.access.format); err != nil {
		fmt.Fprintln(os.Stderr, "haboob:", err)
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "haboob: unexpected arguments %q\n", fs.Args())
		return 2
	}
	level := slog.LevelInfo
	if *debug {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	cf.tls = tf
	if err := serve(log, *configPath, *root, *addr, prof, &cf); err != nil {
		log.Error("haboob", "err", err)
		return 1
	}
	return 0
}

func serve(log *slog.Logger, configPath, root, addr string, prof optionalString, cf *clusterFlags) (err error) {
	data, name := configs.Haboob, configs.HaboobFile
	if cf != nil && cf.given() {
		// Cluster flags without -config: the bundled cluster graph.
		data, name = configs.HaboobCluster, configs.HaboobClusterFile
	}
	if configPath != "" {
		if data, err = os.ReadFile(configPath); err != nil {
			return err
		}
		name = configPath
	}
	cfg, err := stage.ParseConfig(data, name)
	if err != nil {
		return err
	}
	if err := needHttpRecv(cfg); err != nil {
		return err
	}
	croot, err := configRoot(cfg)
	if err != nil {
		return err
	}
	switch {
	case root != "":
		// The flag wins over the configuration.
	case !servesFiles(cfg, cf):
		// A cluster node with no file stage (a worker): no site.
	case croot != "":
		log.Info("haboob: serving the configured root", "root", croot)
	default:
		dir, err := os.MkdirTemp("", "haboob-site-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		if err := haboob.ExtractSite(haboob.BundledSite(), dir); err != nil {
			return err
		}
		root = dir
		log.Info("haboob: serving the bundled site", "root", dir)
	}

	sigs, stopSignals := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stopSignals()
	if cf != nil {
		cf.ctx = sigs // a signal ends a wait for the NATS server
	}
	in, err := buildNode(log, cfg, root, addr, func(pcfg *profiler.Config) {
		if prof.set {
			pcfg.HTTP = prof.value
		}
	}, cf)
	if err != nil {
		if sigs.Err() != nil && errors.Is(err, context.Canceled) {
			log.Info("haboob: stopped before joining the cluster", "err", err)
			return nil
		}
		return err
	}
	if err := in.start(); err != nil {
		return err
	}
	m := in.m
	// SIGHUP: reload the HTTPS certificates and the -config file,
	// keeping connections (reload.go).
	hupStop, hupDone := make(chan struct{}), make(chan struct{})
	hup := notifyHangup()
	go func() { defer close(hupDone); in.onHangup(configPath, hup, hupStop) }()
	defer func() { close(hupStop); <-hupDone }()
	if a := in.hb.Addr(); a != nil {
		if ta := in.hb.TLSAddr(); ta != nil {
			log.Info("haboob: ready", "addr", a.String(), "https", ta.String())
		} else {
			log.Info("haboob: ready", "addr", a.String())
		}
	} else { // a cluster node hosting no HTTP stage
		log.Info("haboob: ready", "node", in.node.Name(), "nats", in.node.URL())
	}

	select {
	case <-sigs.Done():
		log.Info("haboob: shutting down")
	case <-m.Done():
		log.Error("haboob: the stage manager stopped", "err", m.Err())
	}
	stopSignals() // a second signal kills the process the default way

	bound := cfg.Global.Shutdown
	if bound <= 0 {
		bound = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	errs := []error{in.shutdown(ctx)}
	if err := m.Err(); err != nil && !errors.Is(err, context.Canceled) {
		errs = append(errs, err)
	}
	err = errors.Join(errs...)
	if err == nil {
		log.Info("haboob: stopped")
	}
	return err
}

// adminHelp closes -h: where the admin endpoints are.
const adminHelp = `
Admin endpoints, on the profiler's address (-profiler, global.profiler.http;
http://127.0.0.1:9090 with the embedded configuration), not on the site's:
  /debug/sandstorm/  dashboard          /metrics  Prometheus metrics
  /healthz           200 while running  /readyz   200 serving, 503 draining or given up
  /config            effective configuration (YAML, secrets redacted)
  /debug/pprof/      Go profiles

Signals: SIGHUP reloads the HTTPS certificates and the -config file in place
(predicates, queue thresholds, thread-pool and batching bounds; added stages
start, removed ones drain; connections stay open); a file with errors is
refused and every error logged, the running configuration stays. SIGINT or
SIGTERM shuts down gracefully within global.shutdown.
`

// instance is a Haboob built from a configuration: the web server's
// stages, the manager running them and the profiler.
type instance struct {
	log *slog.Logger
	hb  *haboob.Server
	m   *stage.Manager
	p   *profiler.Profiler
	// node is this process's cluster membership (nil without a cluster).
	node *remote.Node
	// al is the access log (-access-log; nil: none).
	al *accesslog.Log
	// mem raises the memory signal (memory.go); tr is -otel's tracing.
	mem memoryWatch
	tr  tracing
}

// build wires Haboob from cfg: root and addr override the configuration
// when not empty (an empty root leaves CacheMiss's own `root` arg in
// force), and tune adjusts the profiler's configuration (nil: as
// configured).
func build(log *slog.Logger, cfg *stage.Config, root, addr string, tune func(*profiler.Config)) (*instance, error) {
	return buildNode(log, cfg, root, addr, tune, nil)
}

// buildNode is build for one node of a cluster (cf: the command's
// cluster flags, nil for none); see cluster.go.
func buildNode(log *slog.Logger, cfg *stage.Config, root, addr string, tune func(*profiler.Config), cf *clusterFlags) (*instance, error) {
	opts := haboob.Options{Root: root, Addr: addr, Logger: log}
	if cf != nil {
		opts.TLSAddr, opts.TLSCert, opts.TLSKey = cf.tls.addr, cf.tls.cert, cf.tls.key
		opts.DisableHTTP2 = cf.tls.noHTTP2
	}
	al, err := cf.openAccessLog()
	if err != nil {
		return nil, err
	}
	opts.AccessLog = al
	hb := haboob.New(opts)
	reg := stage.NewRegistry()
	hb.Register(reg)
	tr, err := cf.tracing()
	if err != nil {
		_ = closeAccessLog(al)
		return nil, err
	}
	tr.wrap(reg)
	var override func(*remote.ClusterConfig)
	if cf != nil {
		override = cf.override
	}
	orphaned := newOrphans(keepTTL(cfg))
	m, node, err := remote.NewManager(cfg, reg, stage.Options{Logger: log},
		remote.Options{Codecs: haboobCodecsFor(orphaned), Context: cf.context(), Watcher: orphaned}, override)
	if err != nil {
		_ = closeAccessLog(al)
		return nil, err
	}
	orphaned.watch(node, m)
	if err := attachAccessLog(log, al, m); err != nil {
		_ = node.Close()
		_ = closeAccessLog(al)
		return nil, err
	}
	pcfg, err := profiler.ConfigFrom(m)
	if err != nil {
		_ = closeAccessLog(al)
		return nil, err
	}
	if tune != nil {
		tune(&pcfg)
	}
	p, err := profiler.New(m, pcfg, log)
	if err != nil {
		_ = node.Close()
		_ = closeAccessLog(al)
		return nil, err
	}
	return &instance{log: log, hb: hb, m: m, p: p, node: node, al: al, mem: watchMemory(m, hb), tr: tr}, nil
}

// start starts the stages, then the profiler. A profiler that cannot start
// (its dashboard port in use, its log file not writable) is a start-up
// error: the server is stopped again, so that an operator who asked for the
// dashboard does not get a server without it (-profiler "" turns it off).
func (in *instance) start() error {
	if err := in.m.Start(context.Background()); err != nil {
		_ = in.hb.Close()
		_ = in.node.Close()
		_ = closeAccessLog(in.al)
		return err
	}
	if err := in.p.Start(context.Background()); err != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = in.hb.Close()
		_ = in.m.Shutdown(ctx)
		_ = closeAccessLog(in.al)
		return fmt.Errorf("profiler not started (-profiler \"\" runs without it): %w", err)
	}
	in.mem.start()
	if a := in.p.Addr(); a != nil {
		in.log.Info("haboob: profiler dashboard", "url", "http://"+a.String()+profiler.DashboardPath)
	}
	return nil
}

// needHttpRecv checks that the configuration has a stage that serves HTTP
// (handler haboob.HttpRecv): without one Haboob would run with no socket.
func needHttpRecv(cfg *stage.Config) error {
	for _, st := range cfg.Stages {
		if st.Config.Handler == haboob.HandlerHttpRecv {
			return nil
		}
	}
	return &stage.ConfigError{File: cfg.File, Err: fmt.Errorf("no stage has handler %s: Haboob needs one to accept connections (see configs/haboob.yaml)", haboob.HandlerHttpRecv)}
}

// shutdown stops the HTTP server first: it reads no more requests and
// finishes the responses it owes while the stages still run (a large file
// is still being streamed through asyncFile); then the stages have nothing
// left to drain, and the profiler stops last. A cluster node stops taking
// events from other nodes once its own HTTP responses are out, and leaves
// NATS after its stages have drained.
func (in *instance) shutdown(ctx context.Context) error {
	in.p.Drain() // /readyz: 503 from the first moment of the shutdown
	hbErr := in.hb.Shutdown(ctx)
	// Every response is out: the access log has its last line.
	alErr := closeAccessLog(in.al)
	in.mem.stop(ctx)
	return errors.Join(hbErr, alErr, in.node.Shutdown(ctx), in.m.Shutdown(ctx), in.p.Shutdown(ctx), in.node.Close(), in.tr.shutdown(ctx))
}

// configRoot returns the document root the configuration sets: the `root`
// arg of its CacheMiss stage, or "".
func configRoot(cfg *stage.Config) (string, error) {
	for _, st := range cfg.Stages {
		if st.Config.Handler != haboob.HandlerCacheMiss || st.Config.Args == nil {
			continue
		}
		// the handler's Init decodes (and checks) the whole block: only
		// root is read here
		var root string
		if err := st.Config.Args.Key("root").Decode(&root); err != nil {
			return "", err
		}
		if root != "" {
			return root, nil
		}
	}
	return "", nil
}
