// Command arashi runs Arashi, the web e-mail service of the SEDA thesis
// (chapter 6 §3), on the Haboob stage graph of configs/arashi.yaml (embedded)
// with a SQLite mail store.
//
//	arashi [-addr HOST:PORT] [-profiler HOST:PORT] [-db FILE] [-users N] [-seed N] [-pool N] [-config FILE] [-predicate BLOCK] [-degrade MODE]
//
// With no flags it generates a fresh mail store of 64 users in a temporary
// directory (a few seconds; removed at exit) and serves it on
// http://127.0.0.1:8081: log in as user2 / pass2 (user1 has the largest
// folder, 12,794 messages). -db keeps the store in FILE (generated only if
// it has no users). -degrade alone|admission switches on service
// degradation (arashi.Degrade). -profiler ADDR (default off, as in
// configs/arashi.yaml; 127.0.0.1:9091 is free beside Haboob's 9090) opens
// the admin port Haboob has: the dashboard at /debug/sandstorm/, /metrics,
// /healthz, /readyz, /config and /debug/pprof/. SIGINT or SIGTERM shuts it down cleanly.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sandstorm-go/sandstorm/apps/arashi"
	"github.com/sandstorm-go/sandstorm/profiler"
)

func main() { os.Exit(run(os.Args[1:])) }

func run(args []string) int {
	fs := flag.NewFlagSet("arashi", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:8081", "listen address (port 0: any free port)")
	db := fs.String("db", "", "SQLite database file (default: a fresh one in a temporary directory)")
	users := fs.Int("users", 64, "users to generate into an empty database")
	seed := fs.Uint64("seed", 1, "generator seed (the same seed, the same mailboxes)")
	pool := fs.Int("pool", 4, "database connections")
	config := fs.String("config", "", "stage configuration (default: the embedded configs/arashi.yaml)")
	pred := fs.String("predicate", "", `admission block for every request type, e.g. "{type: threshold, limit: 1000000}" (default: the configuration's)`)
	degrade := fs.String("degrade", "off", "service degradation: off, alone (no admission control) or admission (back on at the lowest quality)")
	prof := fs.String("profiler", "", `admin address (dashboard, /metrics, /healthz, /readyz, /config, /debug/pprof/), e.g. 127.0.0.1:9091, overriding global.profiler.http (default: off)`)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	mode, err := arashi.ParseDegrade(*degrade)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "arashi: unexpected arguments %q\n", fs.Args())
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	cfg := arashi.Config{File: *config, DB: *db, Users: *users, Seed: *seed, Pool: *pool, Addr: *addr, Predicate: *pred, Degrade: mode, Profiler: *prof, Logger: log}
	if *config != "" {
		data, err := os.ReadFile(*config)
		if err != nil {
			log.Error("arashi", "err", err)
			return 1
		}
		cfg.YAML = data
	}
	sigs, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	svc, err := arashi.Start(sigs, cfg)
	if err != nil {
		log.Error("arashi", "err", err)
		return 1
	}
	log.Info("arashi: ready", "url", "http://"+svc.App.Addr().String()+"/", "login", "user2 / pass2")
	if p := svc.Profiler(); p != nil && p.Addr() != nil {
		log.Info("arashi: admin port", "dashboard", "http://"+p.Addr().String()+profiler.DashboardPath,
			"endpoints", "/metrics /healthz /readyz /config /debug/pprof/")
	}
	select {
	case <-sigs.Done():
		log.Info("arashi: shutting down")
	case <-svc.Manager.Done():
		log.Error("arashi: the stage manager stopped", "err", svc.Manager.Err())
	}
	stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := svc.Shutdown(ctx); err != nil {
		log.Error("arashi: shutdown", "err", err)
		return 1
	}
	return 0
}
