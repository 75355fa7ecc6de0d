package threadpool

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/sandstorm-go/sandstorm/internal/sinkrt"
)

// SharedConfig configures a SharedPool.
type SharedConfig struct {
	Threads int // goroutines serving all stages (0 → 4)
	Logger  *slog.Logger
}

// SharedPool is the alternative thread manager: one pool of goroutines
// serving every stage added to it, choosing among stages with work by smooth
// weighted round robin, so a stage of weight 3 gets three batches for every
// one of a stage of weight 1 while both are busy.
type SharedPool struct {
	cfg   SharedConfig
	ready chan struct{}

	mu      sync.Mutex
	entries []*sharedEntry

	live     atomic.Int32  // goroutines running
	finished chan struct{} // closed when the last goroutine has exited
	stop     chan struct{}
	started  atomic.Bool
}

type sharedEntry struct {
	pool           *SharedPool
	st             Stage
	weight         int
	current        int
	singleThreaded bool
	busy           int           // workers inside RunBatch for this stage
	done           chan struct{} // closed once drained and removed
}

var _ Runner = (*sharedEntry)(nil)

// NewSharedPool returns a shared pool; call Start to run it.
func NewSharedPool(cfg SharedConfig) *SharedPool {
	if cfg.Threads <= 0 {
		cfg.Threads = 4
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &SharedPool{cfg: cfg, ready: make(chan struct{}, 1), stop: make(chan struct{}), finished: make(chan struct{})}
}

// Threads returns the number of goroutines in the pool.
func (sp *SharedPool) Threads() int { return sp.cfg.Threads }

// Add makes the pool serve st with the given weight (≤ 0 → 1). It must be
// called before st's queue is used: the queue is switched to signal the
// pool. The returned Runner's Wait returns once st's queue is closed and
// drained.
func (sp *SharedPool) Add(st Stage, weight int, singleThreaded bool) Runner {
	if weight <= 0 {
		weight = 1
	}
	e := &sharedEntry{pool: sp, st: st, weight: weight, singleThreaded: singleThreaded, done: make(chan struct{})}
	sinkrt.Of(st.Queue()).SetReady(sp.ready)
	sp.mu.Lock()
	sp.entries = append(sp.entries, e)
	sp.mu.Unlock()
	sp.signal()
	return e
}

// Start launches the pool's goroutines; they run until Stop or ctx ends.
func (sp *SharedPool) Start(ctx context.Context) {
	if !sp.started.CompareAndSwap(false, true) {
		return
	}
	sp.live.Store(int32(sp.cfg.Threads))
	for i := 0; i < sp.cfg.Threads; i++ {
		go sp.run(ctx)
	}
}

// Stop ends the goroutines (after their current batch) and waits for them.
func (sp *SharedPool) Stop() { _ = sp.Shutdown(context.Background()) }

// Shutdown ends the goroutines (after their current batch) and waits for
// them until ctx ends; it then returns ctx.Err(), leaving the goroutines
// still inside a handler to exit when it returns.
func (sp *SharedPool) Shutdown(ctx context.Context) error {
	sp.mu.Lock()
	select {
	case <-sp.stop:
	default:
		close(sp.stop)
	}
	sp.mu.Unlock()
	if !sp.started.Load() {
		return nil
	}
	return waitDone(ctx, sp.finished)
}

func (sp *SharedPool) signal() {
	select {
	case sp.ready <- struct{}{}:
	default:
	}
}

// pick chooses the next stage with work by smooth weighted round robin and
// marks it busy. Drained stages are removed on the way.
func (sp *SharedPool) pick() *sharedEntry {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	var best *sharedEntry
	total := 0
	kept := sp.entries[:0]
	for _, e := range sp.entries {
		if q := e.st.Queue(); e.busy == 0 && q.IsClosed() && q.Drained() { // IsClosed: no lock on the way
			close(e.done)
			continue
		}
		kept = append(kept, e)
		if sinkrt.Of(e.st.Queue()).Runnable() == 0 || (e.singleThreaded && e.busy > 0) {
			continue
		}
		e.current += e.weight
		total += e.weight
		if best == nil || e.current > best.current {
			best = e
		}
	}
	clear(sp.entries[len(kept):])
	sp.entries = kept
	if best != nil {
		best.current -= total
		best.busy++
	}
	return best
}

func (sp *SharedPool) run(ctx context.Context) {
	defer func() {
		if sp.live.Add(-1) == 0 {
			close(sp.finished)
		}
	}()
	var b batchBuf
	for {
		e := sp.pick()
		if e == nil {
			select {
			case <-sp.ready:
				continue
			case <-sp.stop:
				return
			case <-ctx.Done():
				return
			}
		}
		q := e.st.Queue()
		lim := b.fit(max(e.st.BatchSize(), 1), q.Len())
		n := q.Dequeue(b.events[:lim], b.stamps[:lim])
		if n > 0 {
			e.st.RunBatch(b.events[:n], b.scratch[:n], b.stamps[:n])
			clear(b.events[:n])
			sinkrt.Of(q).Finish(n)
		}
		sp.mu.Lock()
		e.busy--
		sp.mu.Unlock()
		sp.signal() // others may have work, or a drained stage to retire
	}
}

func (e *sharedEntry) Size() int         { return e.pool.cfg.Threads }
func (e *sharedEntry) Processed() uint64 { return sinkrt.Of(e.st.Queue()).Finished() }

// Wait returns once the stage's queue is closed and drained, or once the
// pool's goroutines have all exited (Stop, or the end of Start's context),
// after which nothing will serve the stage any more; or when ctx ends.
func (e *sharedEntry) Wait(ctx context.Context) error {
	e.pool.signal()
	select {
	case <-e.done:
		return nil
	case <-e.pool.finished:
		return nil
	default:
	}
	select {
	case <-e.done:
	case <-e.pool.finished:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}
