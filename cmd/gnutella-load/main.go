// Command gnutella-load is the workload generator of the Gnutella router
// experiments (SEDA thesis ch. 6 §2.3): simulated peers on loopback that
// connect to a router, run the 0.4 handshake and send Pings and Queries
// (85/15, the thesis's traffic model) at a fixed total rate, open loop,
// measuring the latency of every forward another simulated peer receives.
//
//	gnutella-load [-addr 127.0.0.1:6346] [-peers 4] [-rate 1000] [-duration 10s]
//	              [-queries 0.15] [-ttl 2] [-drain 30s]
//
// With -experiment it starts the router itself (configs/gnutella.yaml, in
// this process, on a free port, with the 20 ms Query delay) and reproduces
// a figure into -o:
//
//	-experiment fig41   mean Ping and Query latency at 100, 200, 400 and 1000
//	                    packets/s, without (one routing thread) and with the
//	                    thread-pool controller: gnutella-fig41.svg and .md
//	-experiment fig42   1000 packets/s with the controller and the profiler on:
//	                    gnutella-fig42-profile.log (plot it with
//	                    cmd/sandstorm-plot) and the stage graph
//	                    gnutella-fig28.dot (.svg when Graphviz is installed);
//	                    the router's Catcher joins a second, idle router
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
	"path/filepath"
	"strings"
	"time"

	"github.com/sandstorm-go/sandstorm/apps/gnutella"
	"github.com/sandstorm-go/sandstorm/configs"
	"github.com/sandstorm-go/sandstorm/profiler"
	"github.com/sandstorm-go/sandstorm/stage"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gnutella-load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := loadConfig{}
	fs.StringVar(&cfg.Addr, "addr", gnutella.DefaultAddr, "router address")
	fs.IntVar(&cfg.Peers, "peers", 4, "simulated peers")
	fs.Float64Var(&cfg.Rate, "rate", 1000, "descriptors per second, all peers together")
	fs.DurationVar(&cfg.Duration, "duration", 10*time.Second, "how long to send")
	fs.Float64Var(&cfg.Queries, "queries", 0.15, "fraction of Queries (the rest are Pings)")
	ttl := fs.Int("ttl", 2, "TTL of the descriptors sent (2: forwarded once)")
	fs.DurationVar(&cfg.Drain, "drain", 30*time.Second, "after sending, wait at most this long for descriptors in flight")
	seed := fs.Uint64("seed", 1, "random seed of the Ping/Query mix")
	experiment := fs.String("experiment", "", "fig41 or fig42: start the router in-process and reproduce the figure")
	out := fs.String("o", ".", "directory for the experiment's files")
	delay := fs.Duration("query-delay", 20*time.Millisecond, "experiments: the router's delay per Query")
	rates := fs.String("rates", "100,200,400,1000", "fig41: packet rates")
	fs.StringVar(&controllerOverride, "controller", "", `experiments: GnutellaRouter's thread-pool controller block, e.g. "{enabled: true, interval: 2s, queueThreshold: 1000}" (default: the configuration's)`)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if cfg.Peers < 2 || cfg.Rate <= 0 || cfg.Duration <= 0 || cfg.Queries < 0 || cfg.Queries > 1 || *ttl < 1 || *ttl > 255 {
		fmt.Fprintln(stderr, "gnutella-load: need -peers ≥ 2, -rate > 0, -duration > 0, -queries in [0,1], -ttl in 1..255")
		return 2
	}
	cfg.TTL, cfg.Seed = byte(*ttl), *seed
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var err error
	switch *experiment {
	case "":
		var r result
		if r, err = runLoad(ctx, cfg); err == nil {
			fmt.Fprintln(stdout, r.String())
		}
	case "fig41":
		err = fig41(ctx, cfg, *rates, *delay, *out, stdout)
	case "fig42":
		err = fig42(ctx, cfg, *delay, *out, stdout)
	default:
		fmt.Fprintf(stderr, "gnutella-load: unknown experiment %q\n", *experiment)
		return 2
	}
	if err != nil {
		fmt.Fprintln(stderr, "gnutella-load:", err)
		return 1
	}
	return 0
}

func (r result) String() string {
	return fmt.Sprintf("rate %.0f/s: ping mean %.1f ms p90 %.1f ms (%d/%d forwards), query mean %.1f ms p90 %.1f ms (%d/%d forwards), %v",
		r.Rate, r.MeanMS[iPing], r.P90MS[iPing], r.Received[iPing], r.Expected[iPing],
		r.MeanMS[iQuery], r.P90MS[iQuery], r.Received[iQuery], r.Expected[iQuery], r.Elapsed.Round(time.Millisecond))
}

// controllerOverride replaces GnutellaRouter's controller block in the
// experiments (-controller).
var controllerOverride string

// inProcess is a router started by an experiment.
type inProcess struct {
	node *gnutella.Node
	m    *stage.Manager
	p    *profiler.Profiler
}

// startRouter starts configs/gnutella.yaml on a free port with the Query
// delay; controller false pins GnutellaRouter to one thread (the thesis's
// Fig. 41a). prof, if set, turns the profiler on with these files.
func startRouter(delay time.Duration, controller bool, prof *profiler.Config, hosts ...string) (*inProcess, error) {
	text := string(configs.Gnutella)
	const on = "controller: {enabled: true, interval: 1s, queueThreshold: 100, idle: 5s}"
	if strings.Count(text, on) != 1 {
		return nil, fmt.Errorf("configs/gnutella.yaml: GnutellaRouter's controller line changed; update the experiment")
	}
	switch {
	case !controller:
		text = strings.Replace(text, on, "controller: {enabled: false}", 1)
	case controllerOverride != "":
		text = strings.Replace(text, on, "controller: "+controllerOverride, 1)
	}
	cfg, err := stage.ParseConfig([]byte(text), configs.GnutellaFile)
	if err != nil {
		return nil, err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	node := gnutella.New(gnutella.Options{Addr: "127.0.0.1:0", QueryDelay: &delay, Logger: log, Hosts: hosts})
	reg := stage.NewRegistry()
	node.Register(reg)
	m, err := stage.NewFromConfig(cfg, reg, stage.Options{Logger: log})
	if err != nil {
		return nil, err
	}
	pcfg := profiler.Config{}
	if prof != nil {
		pcfg = *prof
	}
	p, err := profiler.New(m, pcfg, log)
	if err != nil {
		return nil, err
	}
	if err := m.Start(context.Background()); err != nil {
		return nil, err
	}
	if err := p.Start(context.Background()); err != nil {
		return nil, err
	}
	return &inProcess{node: node, m: m, p: p}, nil
}

func (r *inProcess) stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return errors.Join(r.node.Shutdown(ctx), r.m.Shutdown(ctx), r.p.Shutdown(ctx))
}

// watchPool records the most threads GnutellaRouter had during a run.
func watchPool(m *stage.Manager, done <-chan struct{}) <-chan int {
	res := make(chan int, 1)
	go func() {
		st, _ := m.Stage(gnutella.StageRouter)
		most := 0
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			if n := st.Stats().PoolSize; n > most {
				most = n
			}
			select {
			case <-done:
				res <- most
				return
			case <-t.C:
			}
		}
	}()
	return res
}

func fig42(ctx context.Context, cfg loadConfig, delay time.Duration, dir string, stdout io.Writer) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	prof := &profiler.Config{Enabled: true, Interval: 500 * time.Millisecond,
		File: filepath.Join(dir, "gnutella-fig42-profile.log"), Graph: filepath.Join(dir, "gnutella-fig28.dot")}
	if controllerOverride != "" { // a variant: keep the figure's files
		prof.File = filepath.Join(dir, "gnutella-fig42-variant-profile.log")
		prof.Graph = filepath.Join(dir, "gnutella-fig42-variant-graph.dot")
	}
	_ = os.Remove(prof.File)
	// A neighbouring router for GnutellaCatcher to join, so that the
	// stage graph (Fig. 28) shows the Catcher at work: its connection
	// handed to GnutellaServer, its Pings through GnutellaRouter, the
	// Pongs back to it.
	nb, err := startRouter(0, true, nil)
	if err != nil {
		return err
	}
	defer nb.stop()
	r, err := startRouter(delay, true, prof, nb.node.Addr().String())
	if err != nil {
		return err
	}
	cfg.Addr = r.node.Addr().String()
	done := make(chan struct{})
	most := watchPool(r.m, done)
	res, err := runLoad(ctx, cfg)
	close(done)
	threads := <-most
	st := r.node.Stats()
	if e := r.stop(); err == nil {
		err = e
	}
	fmt.Fprintf(stdout, "fig42: %s; GnutellaRouter threads up to %d; router %+v\n", res, threads, st)
	return err
}
