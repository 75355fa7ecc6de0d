package profiler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandstorm-go/sandstorm/internal/ring"
	"github.com/sandstorm-go/sandstorm/stage"
)

// Errors returned by Profiler methods.
var (
	ErrStarted = errors.New("profiler: already started")
	ErrStopped = errors.New("profiler: stopped")
)

// historyLen is how many samples the profiler keeps for the dashboard.
const historyLen = 600

// Profiler samples a manager periodically: it appends the samples to the
// profile log, keeps the stage graph file up to date and serves the HTTP
// dashboard and metrics endpoints, as its Config says.
type Profiler struct {
	m   *stage.Manager
	cfg Config
	log *slog.Logger
	s   *sampler

	mu      sync.Mutex
	state   int // 0 new, 1 running, 2 stopped
	cancel  context.CancelFunc
	loopWG  sync.WaitGroup
	serveWG sync.WaitGroup
	file    *os.File
	lw      *LogWriter
	ln      net.Listener
	srv     *http.Server
	srvOnce sync.Once     // the server is closed once: by Shutdown or when Start's ctx ends
	stopped chan struct{} // closed when Shutdown begins; ends long polls

	writeMu   sync.Mutex // serializes sampling and writing
	writeErrs int        // profile writes that failed

	hmu     sync.RWMutex
	history *ring.Ring[Sample] // the last historyLen samples
	fresh   chan struct{}      // closed and replaced at every new sample
	polls   atomic.Int32       // requests waiting for a sample

	draining atomic.Bool // Drain was called: /readyz answers 503
}

// New returns a profiler of m, not started. Zero fields of cfg take their
// defaults; logger may be nil.
func New(m *stage.Manager, cfg Config, logger *slog.Logger) (*Profiler, error) {
	if m == nil {
		return nil, errors.New("profiler: nil manager")
	}
	if cfg.Interval < 0 {
		return nil, fmt.Errorf("%w: profiler: negative interval %v", stage.ErrInvalidConfig, cfg.Interval)
	}
	if cfg.HTTP != "" {
		if _, _, err := net.SplitHostPort(cfg.HTTP); err != nil {
			return nil, fmt.Errorf("%w: profiler: bad listen address %q: %w", stage.ErrInvalidConfig, cfg.HTTP, err)
		}
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Profiler{
		m:       m,
		cfg:     cfg.withDefaults(),
		log:     logger.With("component", "profiler"),
		s:       newSampler(m, nil),
		stopped: make(chan struct{}),
		fresh:   make(chan struct{}),
		history: ring.New[Sample](historyLen),
	}, nil
}

// Config returns the profiler's configuration, defaults applied.
func (p *Profiler) Config() Config { return p.cfg }

// Addr returns the address the HTTP endpoint listens on (useful with port
// 0), or nil when it is off or not started.
func (p *Profiler) Addr() net.Addr {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln == nil {
		return nil
	}
	return p.ln.Addr()
}

// Start opens the profile log (when Enabled), listens on the HTTP address
// (when set), takes a first sample and starts sampling every Interval.
// With neither Enabled nor HTTP it does nothing. Cancelling ctx stops the
// sampling and the HTTP server; call Shutdown or Close in any case to write
// the last sample and the graph and release the files.
func (p *Profiler) Start(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch p.state {
	case 1:
		return ErrStarted
	case 2:
		return ErrStopped
	}
	if !p.cfg.active() {
		p.state = 1
		return nil
	}
	if p.cfg.Enabled {
		f, err := os.OpenFile(p.cfg.File, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			return fmt.Errorf("profiler: profile log: %w", err)
		}
		p.writeMu.Lock()
		p.file, p.lw = f, NewLogWriter(f)
		p.writeMu.Unlock()
	}
	if p.cfg.HTTP != "" {
		ln, err := net.Listen("tcp", p.cfg.HTTP)
		if err != nil {
			p.writeMu.Lock()
			if p.file != nil {
				_ = p.file.Close()
				p.file, p.lw = nil, nil
			}
			p.writeMu.Unlock()
			return fmt.Errorf("profiler: http: %w", err)
		}
		p.ln = ln
		p.srv = &http.Server{
			Handler:           p.Handler(),
			ReadHeaderTimeout: 10 * time.Second,
			ErrorLog:          slog.NewLogLogger(p.log.Handler(), slog.LevelWarn),
		}
		p.serveWG.Add(1)
		go func() {
			defer p.serveWG.Done()
			if err := p.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				p.log.Error("http endpoint stopped", "err", err)
			}
		}()
		p.log.Info("serving dashboard", "url", "http://"+ln.Addr().String()+"/debug/sandstorm/")
	}
	p.state = 1
	p.tick()

	lctx, cancel := context.WithCancel(ctx)
	p.cancel = cancel
	p.loopWG.Add(1)
	go func() {
		defer p.loopWG.Done()
		p.loop(lctx)
	}()
	return nil
}

func (p *Profiler) loop(ctx context.Context) {
	t := time.NewTicker(p.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			if p.srv != nil {
				p.srvOnce.Do(func() { _ = p.srv.Close() })
			}
			return
		case <-t.C:
			p.tick()
		}
	}
}

// tick takes a sample, keeps it for the dashboard and writes it to the
// files.
func (p *Profiler) tick() Sample {
	p.writeMu.Lock()
	defer p.writeMu.Unlock()
	s := p.s.take()
	p.record(s)
	return s
}

// record keeps a sample for the dashboard and writes it to the files. The
// caller holds writeMu.
func (p *Profiler) record(s Sample) {
	p.hmu.Lock()
	p.history.Push(s)
	close(p.fresh)
	p.fresh = make(chan struct{})
	p.hmu.Unlock()

	if p.lw == nil {
		return
	}
	err := p.lw.Write(&s, p.cfg.Interval)
	if err == nil {
		err = p.lw.Flush()
	}
	if err == nil {
		err = writeFileAtomic(p.cfg.Graph, Dot(&s))
	}
	if err != nil {
		p.writeErrs++
		if p.writeErrs <= 3 || p.writeErrs%100 == 0 {
			p.log.Error("writing profile", "err", err, "errors", p.writeErrs)
		}
	}
}

// Latest returns the most recent sample, and false before the first.
func (p *Profiler) Latest() (Sample, bool) {
	p.hmu.RLock()
	defer p.hmu.RUnlock()
	return p.latestLocked()
}

// latestLocked is Latest; the caller holds hmu.
func (p *Profiler) latestLocked() (Sample, bool) {
	if n := p.history.Len(); n > 0 {
		return p.history.At(n - 1), true
	}
	return Sample{}, false
}

// History returns the samples kept for the dashboard, oldest first.
func (p *Profiler) History() []Sample {
	p.hmu.RLock()
	defer p.hmu.RUnlock()
	return p.history.AppendTo(nil)
}

// Sample takes a sample now, outside the periodic schedule, and records it
// like the periodic ones (history, profile log, graph file).
func (p *Profiler) Sample() Sample { return p.tick() }

// waitSample waits until a sample newer than seq exists, ctx ends, the
// profiler stops or the timeout passes, and returns the latest sample.
func (p *Profiler) waitSample(ctx context.Context, seq uint64, timeout time.Duration) (Sample, bool) {
	p.hmu.RLock()
	fresh := p.fresh
	latest, ok := p.latestLocked()
	p.hmu.RUnlock()
	if ok && latest.Seq > seq {
		return latest, true
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	p.polls.Add(1)
	defer p.polls.Add(-1)
	select {
	case <-fresh:
	case <-ctx.Done():
	case <-p.stopped:
	case <-t.C:
	}
	return p.Latest()
}

// Shutdown stops sampling, writes a last sample to the profile log and the
// stage graph (rendered to SVG beside the .dot file when Graphviz's dot is
// installed), closes the log and shuts the HTTP server down gracefully,
// like http.Server.Shutdown, and removes the predicate gauges the profiler
// registered in the manager's registry. Call it after the manager's
// Shutdown so the last sample holds the final counts.
func (p *Profiler) Shutdown(ctx context.Context) error {
	return p.stop(ctx, false)
}

// Close is Shutdown without waiting for HTTP requests in progress.
func (p *Profiler) Close() error {
	return p.stop(context.Background(), true)
}

func (p *Profiler) stop(ctx context.Context, now bool) error {
	p.mu.Lock()
	if p.state == 2 {
		p.mu.Unlock()
		return ErrStopped
	}
	wasRunning := p.state == 1
	p.state = 2
	p.mu.Unlock()
	if !wasRunning || !p.cfg.active() {
		p.s.release()
		return nil
	}
	close(p.stopped)
	var errs []error
	if p.srv != nil {
		p.srvOnce.Do(func() {
			if now {
				_ = p.srv.Close()
			} else if err := p.srv.Shutdown(ctx); err != nil {
				errs = append(errs, fmt.Errorf("profiler: http shutdown: %w", err))
				_ = p.srv.Close()
			}
		})
		p.serveWG.Wait()
	}
	p.cancel()
	p.loopWG.Wait()

	s := p.tick()
	p.s.release()
	p.writeMu.Lock()
	defer p.writeMu.Unlock()
	if p.file != nil {
		if err := p.file.Close(); err != nil {
			errs = append(errs, fmt.Errorf("profiler: profile log: %w", err))
		}
		p.file, p.lw = nil, nil
		svg, err := RenderSVG(ctx, Dot(&s))
		switch {
		case errors.Is(err, ErrNoDot):
			p.log.Info("graphviz dot not installed: stage graph left as .dot", "graph", p.cfg.Graph)
		case err != nil:
			errs = append(errs, err)
		default:
			errs = append(errs, writeFileAtomic(svgPath(p.cfg.Graph), svg))
		}
	}
	if p.writeErrs > 0 {
		errs = append(errs, fmt.Errorf("profiler: %d profile writes failed (see log)", p.writeErrs))
	}
	return errors.Join(errs...)
}

// svgPath is where the rendered graph goes: the .dot path with .svg.
func svgPath(dot string) string {
	return strings.TrimSuffix(dot, ".dot") + ".svg"
}

// writeFileAtomic replaces path with data through a temporary file, so a
// reader never sees half a graph.
func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
