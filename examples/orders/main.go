package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8090", "listen address")
	timeout := flag.Duration("timeout", time.Second, "longest wait for an answer (then 504)")
	configPath := flag.String("config", "", "stage configuration (default: the embedded orders.yaml)")
	load := flag.Int("load", 0, "run as a load generator with this many concurrent clients instead of serving")
	dur := flag.Duration("for", 10*time.Second, "load test duration")
	url := flag.String("url", "http://127.0.0.1:8090/orders", "load test target")
	rate := flag.Float64("rate", 0, "load test: send this many requests/s (open loop, at most -load in flight) instead of -load clients back to back")
	flag.Parse()
	if *load > 0 {
		r, err := runLoad(context.Background(), *url, *load, *dur, *rate)
		if err != nil {
			fmt.Fprintln(os.Stderr, "orders:", err)
			os.Exit(1)
		}
		fmt.Print(r)
		return
	}
	if *configPath != "" {
		data, err := os.ReadFile(*configPath)
		if err != nil {
			fmt.Fprintln(os.Stderr, "orders:", err)
			os.Exit(1)
		}
		config, configName = data, *configPath
	}
	if err := serve(*addr, *timeout); err != nil {
		slog.Error("orders", "err", err)
		os.Exit(1)
	}
}

func serve(addr string, timeout time.Duration) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	svc, err := newService(context.Background(), timeout)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		_ = svc.m.Shutdown(context.Background())
		return err
	}
	srv := &http.Server{Handler: svc.handler, ReadHeaderTimeout: 5 * time.Second}
	slog.Info("orders: serving", "addr", ln.Addr().String())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, st := range svc.m.Stages() {
		s := st.Stats()
		slog.Info("orders: stage", "stage", st.Name(), "handled", s.Events, "rejected", s.RejectedFull+s.RejectedPredicate,
			"expired", s.Expired, "failures", s.Failures)
	}
	err = errors.Join(err, srv.Shutdown(sctx), svc.m.Shutdown(sctx))
	<-errc // Serve has returned
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}
