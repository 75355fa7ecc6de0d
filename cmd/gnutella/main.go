// Command gnutella runs the Gnutella 0.4 packet router of the SEDA thesis
// (chapter 6 §2) as a graph of Sandstorm stages wired in a YAML
// configuration (configs/gnutella.yaml by default, embedded in the
// binary).
//
//	gnutella [-config FILE] [-addr HOST:PORT] [-connect HOST:PORT,...]
//	         [-query-delay 20ms] [-profiler HOST:PORT] [-debug]
//
// It listens on 127.0.0.1:6346 unless -addr says otherwise, answers
// "GNUTELLA CONNECT/0.4\n\n" with "GNUTELLA OK\n\n" and routes Ping, Pong,
// Query, QueryHit and Push descriptors between its peers. -connect gives
// GnutellaCatcher hosts to join the network through; -query-delay sets
// the thesis's deliberate bottleneck (every Query sleeps that long in
// GnutellaRouter). SIGINT or SIGTERM shuts down cleanly within the
// configuration's global.shutdown; the counters are logged at exit.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/sandstorm-go/sandstorm/apps/gnutella"
	"github.com/sandstorm-go/sandstorm/configs"
	"github.com/sandstorm-go/sandstorm/profiler"
	"github.com/sandstorm-go/sandstorm/stage"
)

func main() {
	os.Exit(run(os.Args[1:], nil))
}

// options are the command's flags.
type options struct {
	config     string
	addr       string
	connect    string
	queryDelay time.Duration
	delaySet   bool
	profiler   string
	profSet    bool
}

// run parses args and serves until a signal; ready, if set, is called
// with the listening address (tests).
func run(args []string, ready func(addr string, stop func())) int {
	fs := flag.NewFlagSet("gnutella", flag.ContinueOnError)
	var o options
	fs.StringVar(&o.config, "config", "", "stage configuration file (default: the embedded configs/gnutella.yaml)")
	fs.StringVar(&o.addr, "addr", gnutella.DefaultAddr, "listen address (port 0: any free port)")
	fs.StringVar(&o.connect, "connect", "", "comma-separated hosts for GnutellaCatcher to connect to")
	fs.DurationVar(&o.queryDelay, "query-delay", 0, "deliberate delay for every Query in GnutellaRouter (thesis: 20ms); default: the configuration's")
	fs.StringVar(&o.profiler, "profiler", "", `profiler dashboard address, overriding global.profiler.http ("" turns it off)`)
	debug := fs.Bool("debug", false, "log at debug level")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "gnutella: unexpected arguments %q\n", fs.Args())
		return 2
	}
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "query-delay":
			o.delaySet = true
		case "profiler":
			o.profSet = true
		}
	})
	level := slog.LevelInfo
	if *debug {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	if err := serve(log, o, ready); err != nil {
		log.Error("gnutella", "err", err)
		return 1
	}
	return 0
}

func serve(log *slog.Logger, o options, ready func(string, func())) (err error) {
	data, name := configs.Gnutella, configs.GnutellaFile
	if o.config != "" {
		if data, err = os.ReadFile(o.config); err != nil {
			return err
		}
		name = o.config
	}
	cfg, err := stage.ParseConfig(data, name)
	if err != nil {
		return err
	}
	nopts := gnutella.Options{Addr: o.addr, Logger: log}
	if o.delaySet {
		nopts.QueryDelay = &o.queryDelay
	}
	for _, h := range strings.Split(o.connect, ",") {
		if h = strings.TrimSpace(h); h != "" {
			nopts.Hosts = append(nopts.Hosts, h)
		}
	}
	node := gnutella.New(nopts)
	reg := stage.NewRegistry()
	node.Register(reg)
	m, err := stage.NewFromConfig(cfg, reg, stage.Options{Logger: log})
	if err != nil {
		return err
	}
	pcfg, err := profiler.ConfigFrom(m)
	if err != nil {
		return err
	}
	if o.profSet {
		pcfg.HTTP = o.profiler
	}
	p, err := profiler.New(m, pcfg, log)
	if err != nil {
		return err
	}
	if err := m.Start(context.Background()); err != nil {
		return err
	}
	if err := p.Start(context.Background()); err != nil {
		log.Error("gnutella: profiler not started", "err", err)
	} else if a := p.Addr(); a != nil {
		log.Info("gnutella: profiler dashboard", "url", "http://"+a.String()+profiler.DashboardPath)
	}

	sigs, stopSignals := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stopSignals()
	log.Info("gnutella: ready", "addr", node.Addr().String())
	if ready != nil {
		ready(node.Addr().String(), stopSignals)
	}
	select {
	case <-sigs.Done():
		log.Info("gnutella: shutting down")
	case <-m.Done():
		log.Error("gnutella: the stage manager stopped", "err", m.Err())
	}
	stopSignals()

	bound := cfg.Global.Shutdown
	if bound <= 0 {
		bound = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	errs := []error{node.Shutdown(ctx), m.Shutdown(ctx), p.Shutdown(ctx)}
	if err := m.Err(); err != nil && !errors.Is(err, context.Canceled) {
		errs = append(errs, err)
	}
	log.Info("gnutella: stopped", "stats", fmt.Sprintf("%+v", node.Stats()))
	return errors.Join(errs...)
}
