package stage_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/internal/logbuf"
	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// seqEvent is one producer's numbered event.
type seqEvent struct{ producer, seq int }

// reloadLedger records, per recording stage, how many times each event was
// handled.
type reloadLedger struct {
	mu   sync.Mutex
	seen map[string]map[seqEvent]int
	n    atomic.Int64
}

func newReloadLedger() *reloadLedger { return &reloadLedger{seen: map[string]map[seqEvent]int{}} }

func (l *reloadLedger) record(stage string, batch []sink.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := l.seen[stage]
	if m == nil {
		m = map[seqEvent]int{}
		l.seen[stage] = m
	}
	for _, e := range batch {
		m[e.(seqEvent)]++
	}
	l.n.Add(int64(len(batch)))
}

func (l *reloadLedger) count(stage string, e seqEvent) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.seen[stage][e]
}

func (l *reloadLedger) total(stage string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, c := range l.seen[stage] {
		n += c
	}
	return n
}

// reloadRelay passes every event on to the stage its args name, waiting for
// room rather than dropping (sink.EnqueueWait), so that the graph itself
// loses nothing; a reloadRelay without next records what it gets under its
// `as` name.
type reloadRelay struct {
	l    *reloadLedger
	args struct {
		Next string `yaml:"next"`
		As   string `yaml:"as"`
	}
	next sink.Sink
}

func (r *reloadRelay) Init(c *stage.Context) error {
	if err := c.DecodeArgs(&r.args); err != nil {
		return err
	}
	if r.args.Next == "" {
		return nil
	}
	var err error
	r.next, err = c.Sink(r.args.Next)
	return err
}

func (r *reloadRelay) HandleEvents(batch []sink.Event) error {
	if r.next == nil {
		r.l.record(r.args.As, batch)
		return nil
	}
	for _, e := range batch {
		if err := sink.EnqueueWait(context.Background(), r.next, e); err != nil {
			return err
		}
	}
	return nil
}

// initFails is a handler whose Init fails.
type initFails struct{}

func (initFails) Init(*stage.Context) error             { return errors.New("no resource") }
func (initFails) HandleEvents(batch []sink.Event) error { return nil }

func reloadRegistry(l *reloadLedger) *stage.Registry {
	r := stage.NewRegistry()
	r.Register("test.Relay", func() stage.Handler { return &reloadRelay{l: l} })
	r.Register("test.FailingInit", func() stage.Handler { return initFails{} })
	r.StageArgs("test.Relay", "next")
	return r
}

// Configuration A: producers feed Front → Middle → Last; Side is off
// their path.
const reloadA = `
global:
  shutdown: 30s
  threadpool: {min: 1, max: 2}
stages:
  Front:
    handler: test.Relay
    queue: {threshold: 64}
    args: {next: Middle}
  Middle:
    handler: test.Relay
    queue: {threshold: 32}
    args: {next: Last}
  Last:
    handler: test.Relay
    queue: {threshold: 32}
    args: {as: last}
  Side:
    handler: test.Relay
    args: {as: side}
`

// Configuration B: Front's threshold, predicate and pool change, Middle's
// pool and batching; Side is removed; Fork and Tap are added, Fork (first
// in the file) naming Tap, so Tap must be created first.
const reloadB = `
global:
  shutdown: 30s
  threadpool: {min: 1, max: 2}
stages:
  Front:
    handler: test.Relay
    queue: {threshold: 16}
    predicate: {type: counter, limit: 8}
    threadpool: {min: 2, max: 4}
    args: {next: Middle}
  Middle:
    handler: test.Relay
    queue: {threshold: 32}
    threadpool: {max: 3}
    batching: {max: 4}
    args: {next: Last}
  Last:
    handler: test.Relay
    queue: {threshold: 32}
    args: {as: last}
  Fork:
    handler: test.Relay
    args: {next: Tap}
  Tap:
    handler: test.Relay
    args: {as: tap}
`

// startGraph starts a manager for doc; the test shuts it down at its end
// unless it did so itself.
func startGraph(t *testing.T, doc string, l *reloadLedger) *stage.Manager {
	t.Helper()
	m, err := stage.Parse([]byte(doc), reloadRegistry(l))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Shutdown(context.Background()) })
	return m
}

func parseCfg(t *testing.T, doc string) *stage.Config {
	t.Helper()
	cfg, err := stage.ParseConfig([]byte(doc), "")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// outcome is what producers saw of their events.
type outcome struct {
	mu       sync.Mutex
	accepted map[string][]seqEvent // by the stage that accepted it
	rejected map[string]int
	odd      []error // refusals that are neither a rejection nor a close
}

func (o *outcome) note(stageName string, e seqEvent, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	switch {
	case err == nil:
		o.accepted[stageName] = append(o.accepted[stageName], e)
	case errors.Is(err, sink.ErrRejected) || errors.Is(err, sink.ErrClosed):
		o.rejected[stageName]++
	default:
		o.odd = append(o.odd, err)
	}
}

func (o *outcome) acceptedCount(stageName string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.accepted[stageName])
}

// waitFor polls cond until it holds; the timeout only guards against a
// hang.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestReloadUnderLoad reloads a running graph back and forth between two
// configurations while producers enqueue numbered events as fast as they
// can, into the chain's first stage and into the stage a reload removes:
// every event a stage accepted is handled exactly once, every other one
// came back to its producer as a rejection (counted in the stage's
// statistics) or, on the removed stage, as an error saying so; and the
// counter predicates that reloads installed and replaced got every credit
// back.
func TestReloadUnderLoad(t *testing.T) {
	l := newReloadLedger()
	m := startGraph(t, reloadA, l)
	front, _ := m.Stage("Front")
	out := &outcome{accepted: map[string][]seqEvent{}, rejected: map[string]int{}}
	var removedSeen atomic.Int64 // refusals that named the reload
	stop := make(chan struct{})
	var wg sync.WaitGroup
	const producers = 3
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := 0; ; seq++ {
				select {
				case <-stop:
					return
				default:
				}
				e := seqEvent{p, seq}
				err := front.Sink().Enqueue(e)
				out.note("Front", e, err)
				if err != nil {
					runtime.Gosched() // let the stages drain rather than spin
				}
			}
		}()
	}
	wg.Add(1)
	go func() { // Side's producer keeps its sink until it is refused as closed
		defer wg.Done()
		var side sink.Sink
		for seq := 0; ; seq++ {
			select {
			case <-stop:
				return
			default:
			}
			if side == nil {
				st, ok := m.Stage("Side") // re-added by a later reload
				if !ok {
					runtime.Gosched()
					continue
				}
				side = st.Sink()
			}
			e := seqEvent{producers, seq}
			err := side.Enqueue(e)
			if errors.Is(err, sink.ErrClosed) {
				side = nil
				if strings.Contains(err.Error(), `stage "Side" removed by a configuration reload`) {
					removedSeen.Add(1)
				}
			}
			out.note("Side", e, err)
		}
	}()

	progress := func() {
		before := l.n.Load()
		waitFor(t, "events to flow", func() bool { return l.n.Load() > before+200 })
	}
	progress()
	var sums []*stage.ReloadSummary
	var counters []interface{ InFlight() int } // Front's predicates, each replaced in turn
	for i := range 6 {
		doc := reloadB
		if i%2 == 1 {
			doc = reloadA
		}
		sum, err := m.Reload(parseCfg(t, doc))
		if err != nil {
			t.Fatalf("reload %d: %v", i, err)
		}
		if len(sum.Errors) > 0 || len(sum.NotApplied) > 0 {
			t.Fatalf("reload %d: %s", i, sum)
		}
		sums = append(sums, sum)
		if doc == reloadB {
			c, ok := front.Sink().Predicate().(interface{ InFlight() int })
			if !ok {
				t.Fatalf("reload %d: Front's predicate %T is not the counter", i, front.Sink().Predicate())
			}
			counters = append(counters, c)
		}
		progress()
	}
	close(stop)
	wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	// Every event a replaced counter admitted completed on it: its credits
	// all came back.
	for i, c := range counters {
		if n := c.InFlight(); n != 0 {
			t.Errorf("counter %d still holds %d credits after the drain", i, n)
		}
	}
	first := sums[0]
	if !slices.Equal(first.Added, []string{"Tap", "Fork"}) || !slices.Equal(first.Removed, []string{"Side"}) {
		t.Errorf("first reload: added %v removed %v, want [Tap Fork] [Side]", first.Added, first.Removed)
	}
	wantChanged := []stage.StageChange{
		{Stage: "Front", Keys: []string{"queue.threshold", "predicate", "threadpool"}},
		{Stage: "Middle", Keys: []string{"threadpool", "batching"}},
	}
	if fmt.Sprint(first.Changed) != fmt.Sprint(wantChanged) {
		t.Errorf("first reload changed %v, want %v", first.Changed, wantChanged)
	}
	if len(out.odd) > 0 {
		t.Fatalf("%d refusals that are neither rejections nor closes, first: %v", len(out.odd), out.odd[0])
	}
	for _, c := range []struct{ producedInto, recordedAs string }{{"Front", "last"}, {"Side", "side"}} {
		accepted := out.accepted[c.producedInto]
		if len(accepted) == 0 {
			t.Fatalf("no event accepted by %s", c.producedInto)
		}
		for _, e := range accepted {
			if n := l.count(c.recordedAs, e); n != 1 {
				t.Fatalf("event %+v accepted by %s handled %d times", e, c.producedInto, n)
			}
		}
		if got := l.total(c.recordedAs); got != len(accepted) {
			t.Errorf("%s recorded %d events, %d were accepted", c.recordedAs, got, len(accepted))
		}
	}
	st := front.Stats()
	if refused := int(st.RejectedFull + st.RejectedPredicate + st.RejectedClosed); refused != out.rejected["Front"] {
		t.Errorf("Front counted %d refusals, its producers got %d", refused, out.rejected["Front"])
	}
	if out.rejected["Front"] == 0 {
		t.Error("no event was rejected: the load did not reach the thresholds")
	}
	if removedSeen.Load() == 0 {
		t.Error("Side's producer never got the error of a removed stage")
	}
	t.Logf("accepted %d (front) %d (side), rejected %d (front) %d (side)",
		out.acceptedCount("Front"), out.acceptedCount("Side"), out.rejected["Front"], out.rejected["Side"])
}

// TestReloadApplies checks that the in-place changes are in force on the
// running stages.
func TestReloadApplies(t *testing.T) {
	l := newReloadLedger()
	m := startGraph(t, reloadA, l)
	if _, err := m.Reload(parseCfg(t, reloadB)); err != nil {
		t.Fatal(err)
	}
	front, _ := m.Stage("Front")
	if c := front.Config(); c.Queue.Threshold != 16 || c.ThreadPool.Max != 4 {
		t.Errorf("Front's configuration after reload: threshold %d max %d", c.Queue.Threshold, c.ThreadPool.Max)
	}
	if p := front.Pool().Config(); p.Min != 2 || p.Max != 4 {
		t.Errorf("Front's pool bounds %d..%d, want 2..4", p.Min, p.Max)
	}
	waitFor(t, "Front's pool to grow to its new min", func() bool { return front.Stats().PoolSize >= 2 })
	if front.Sink().Predicate() == nil {
		t.Error("Front has no predicate after reload")
	}
	middle, _ := m.Stage("Middle")
	if bs := middle.Stats().BatchSize; bs != 4 {
		t.Errorf("Middle's batch size %d, want 4", bs)
	}
	if _, ok := m.Stage("Side"); ok {
		t.Error("Side still exists")
	}
	// The added stages run: an event through Fork reaches Tap.
	fork, _ := m.Stage("Fork")
	if err := fork.Sink().Enqueue(seqEvent{0, 1}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "Tap to record the event", func() bool { return l.total("tap") == 1 })

	// Back: the predicate goes, the bounds return.
	if _, err := m.Reload(parseCfg(t, reloadA)); err != nil {
		t.Fatal(err)
	}
	if front.Sink().Predicate() != nil {
		t.Error("Front's predicate still installed")
	}
	if p := front.Pool().Config(); p.Min != 1 || p.Max != 2 {
		t.Errorf("Front's pool bounds %d..%d, want 1..2", p.Min, p.Max)
	}
	if m.Config().Stages[3].Name != "Side" {
		t.Errorf("Config is not the reloaded one: %v", m.Config().Stages)
	}
}

// TestReloadSignal: subscribers hear of each applied reload, with its
// summary; a refused one raises nothing.
func TestReloadSignal(t *testing.T) {
	m := startGraph(t, reloadA, newReloadLedger())
	q := sink.NewQueue(0)
	defer m.Subscribe(stage.SignalReloaded, q)()
	if _, err := m.Reload(parseCfg(t, strings.Replace(reloadA, "handler: test.Relay", "handler: test.Nope", 1))); err == nil {
		t.Fatal("a file with an unknown handler reloaded")
	}
	if q.Len() != 0 {
		t.Fatal("a refused reload raised SignalReloaded")
	}
	sum, err := m.Reload(parseCfg(t, reloadB))
	if err != nil {
		t.Fatal(err)
	}
	events := make([]sink.Event, 2)
	if n := q.Dequeue(events, make([]int64, 2)); n != 1 {
		t.Fatalf("%d events, want 1", n)
	}
	if ev, ok := events[0].(stage.Reloaded); !ok || ev.Summary != sum {
		t.Errorf("event %#v, want Reloaded with the summary", events[0])
	}
}

// TestReloadRefused: a file with errors is refused whole, every error
// reported with its line and key, and the running graph is untouched and
// still serving.
func TestReloadRefused(t *testing.T) {
	l := newReloadLedger()
	m := startGraph(t, reloadA, l)
	before := m.Config()

	bad := filepath.Join(t.TempDir(), "bad.yaml")
	doc := `global:
  threadpool: {min: 1, max: 2}
stages:
  Front:
    handler: test.Relay
    queue: {threshold: 8, colour: red}
    args: {next: Midle}
  Middle:
    handler: test.Relay
    threadpool: {max: -3}
    args: {next: Last}
  Last:
    handler: test.Nope
  New:
    handler: test.Relay
    queue: {max_time: soon}
`
	if err := os.WriteFile(bad, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	sum, err := m.ReloadFile(bad)
	if err == nil {
		t.Fatalf("bad file reloaded: %s", sum)
	}
	ce, ok := errors.AsType[*stage.ConfigError](err)
	if !ok {
		t.Fatalf("error %T %v, want a *stage.ConfigError", err, err)
	}
	want := []string{
		"line 6: stages.Front.queue.colour",
		"line 7: stages.Front.args.next",
		"line 10: stages.Middle.threadpool.max",
		"line 13: stages.Last.handler",
		"line 16: stages.New.queue.max_time",
	}
	errs := ce.Errors()
	if len(errs) != len(want) {
		t.Fatalf("%d errors, want %d:\n%v", len(errs), len(want), err)
	}
	for i, w := range want {
		if !strings.Contains(errs[i].Error(), w) {
			t.Errorf("error %d: %v, want it to name %q", i, errs[i], w)
		}
	}
	if !strings.Contains(err.Error(), bad+":") {
		t.Errorf("errors do not name the file: %v", err)
	}

	if m.Config() != before {
		t.Error("the manager's configuration changed")
	}
	var names []string
	for _, s := range m.Stages() {
		names = append(names, s.Name())
	}
	if !slices.Equal(names, []string{"Front", "Middle", "Last", "Side"}) {
		t.Errorf("stages %v after a refused reload", names)
	}
	front, _ := m.Stage("Front")
	if th := front.Config().Queue.Threshold; th != 64 {
		t.Errorf("Front's threshold %d, want 64", th)
	}
	if err := front.Sink().Enqueue(seqEvent{7, 7}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the old graph to serve", func() bool { return l.count("last", seqEvent{7, 7}) == 1 })

	// A file that is not there is refused too.
	if _, err := m.ReloadFile(filepath.Join(t.TempDir(), "missing.yaml")); !errors.Is(err, stage.ErrReloadRefused) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

// TestReloadInitFailure: an added stage whose Init fails refuses the
// reload; the stages added before it are removed again.
func TestReloadInitFailure(t *testing.T) {
	l := newReloadLedger()
	m := startGraph(t, reloadA, l)
	doc := reloadA + `
  Tap:
    handler: test.Relay
    args: {as: tap}
  Broken:
    handler: test.FailingInit
`
	before := m.Config()
	_, err := m.Reload(parseCfg(t, doc))
	if !errors.Is(err, stage.ErrReloadRefused) || !errors.Is(err, stage.ErrInit) {
		t.Fatalf("reload: %v, want ErrReloadRefused and ErrInit", err)
	}
	if _, ok := m.Stage("Tap"); ok {
		t.Error("Tap was left behind")
	}
	if m.Config() != before {
		t.Error("the configuration changed")
	}
}

// TestReloadKeepsRoutes: a stage that a kept stage still sends to (its
// running args name it) is not removed, even by a file that reroutes the
// sender: the sender's args change only at a restart.
func TestReloadKeepsRoutes(t *testing.T) {
	m := startGraph(t, reloadA, newReloadLedger())
	rerouted := strings.NewReplacer("args: {next: Last}", "args: {next: Side}", "  Last:\n    handler: test.Relay\n    queue: {threshold: 32}\n    args: {as: last}\n", "").Replace(reloadA)
	if !strings.Contains(rerouted, "next: Side") || strings.Contains(rerouted, "Last:") {
		t.Fatalf("the test's edit did not apply:\n%s", rerouted)
	}
	// A second reason: the file adds a stage by the name of one made in Go.
	if _, err := m.CreateStage("Extra", stage.HandlerFunc(func([]sink.Event) error { return nil }), stage.StageConfig{}); err != nil {
		t.Fatal(err)
	}
	rerouted += "  Extra:\n    handler: test.Relay\n"
	_, err := m.Reload(parseCfg(t, rerouted))
	if !errors.Is(err, stage.ErrReloadRefused) || !strings.Contains(err.Error(), `stage "Last" cannot be removed: stage "Middle" sends to it`) ||
		!errors.Is(err, stage.ErrStageExists) {
		t.Fatalf("reload: %v", err)
	}
	if _, ok := m.Stage("Last"); !ok {
		t.Error("Last was removed")
	}
	var logs logbuf.Buffer
	stage.LogReload(slog.New(slog.NewTextHandler(&logs, nil)), "graph.yaml", nil, err)
	if n := strings.Count(logs.String(), "level=ERROR"); n != 2 {
		t.Errorf("%d ERROR records, want one per reason:\n%s", n, logs.String())
	}
}

// TestReloadNotApplied: what a running stage cannot take in place is named
// in the summary, and the stage keeps running as it was.
func TestReloadNotApplied(t *testing.T) {
	tests := []struct {
		name, from, to, want string
	}{
		{"args", "args: {as: a}", "args: {as: b}", "stages.S.args"},
		{"scheduler", "scheduler: fifo", "scheduler: lifo", "stages.S.scheduler"},
		{"ordering", "keyed: false", "keyed: true", "stages.S.ordering"},
		{"dispatch", "queue: {dispatch: 100}", "queue: {dispatch: 200}", "stages.S.queue.dispatch"},
		{"initial", "threadpool: {min: 1, max: 4, initial: 1}", "threadpool: {min: 1, max: 4, initial: 2}", "stages.S.threadpool.initial"},
		{"controller toggled", "threadpool: {min: 1, max: 4}", "threadpool: {min: 1, max: 4, controller: {enabled: false}}", "stages.S.threadpool"},
		{"batching controller", "batching: {max: 8}", "batching: {max: 8, controller: {enabled: true}}", "stages.S.batching.controller.enabled"},
		{"thread manager", "", "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			doc := func(key string) string {
				return "stages:\n  S:\n    handler: test.Relay\n    " + key + "\n"
			}
			from, to := doc(tc.from), doc(tc.to)
			if tc.name == "thread manager" {
				from = "global: {threadManager: {type: pool}}\n" + doc("args: {as: a}")
				to = "global: {threadManager: {type: shared}}\n" + doc("args: {as: a}")
				tc.want = "global.threadManager"
			}
			m := startGraph(t, from, newReloadLedger())
			sum, err := m.Reload(parseCfg(t, to))
			if err != nil {
				t.Fatal(err)
			}
			if len(sum.NotApplied) != 1 || !strings.HasPrefix(sum.NotApplied[0], tc.want+":") {
				t.Fatalf("not applied: %q, want one entry for %s", sum.NotApplied, tc.want)
			}
			if !strings.Contains(sum.String(), "not applied until restart") {
				t.Errorf("summary %q", sum)
			}
		})
	}
}

// TestReloadConcurrent: reloads from several goroutines are serialized;
// the graph ends as one of the files describes.
func TestReloadConcurrent(t *testing.T) {
	m := startGraph(t, reloadA, newReloadLedger())
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			doc := reloadA
			if i%2 == 0 {
				doc = reloadB
			}
			for range 5 {
				if _, err := m.Reload(parseCfg(t, doc)); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	var names []string
	for _, s := range m.Stages() {
		names = append(names, s.Name())
	}
	slices.Sort(names)
	a, b := []string{"Front", "Last", "Middle", "Side"}, []string{"Fork", "Front", "Last", "Middle", "Tap"}
	if !slices.Equal(names, a) && !slices.Equal(names, b) {
		t.Errorf("stages %v: neither file's", names)
	}
}

// TestReloadAfterShutdown is refused.
func TestReloadAfterShutdown(t *testing.T) {
	m, err := stage.Parse([]byte(reloadA), reloadRegistry(newReloadLedger()))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Reload(parseCfg(t, reloadB)); !errors.Is(err, stage.ErrManagerClosed) {
		t.Errorf("reload after shutdown: %v", err)
	}
}

// BenchmarkReload measures one Reload of the test graph: "inplace"
// changes thresholds, a predicate and pool bounds; "addremove" also
// creates two stages and drains and destroys one (and back).
func BenchmarkReload(b *testing.B) {
	for _, bc := range []struct {
		name string
		to   string
	}{
		{"inplace", strings.NewReplacer("threshold: 64}", "threshold: 16}\n    predicate: {type: counter, limit: 8}\n    threadpool: {min: 2, max: 4}").Replace(reloadA)},
		{"addremove", reloadB},
	} {
		b.Run(bc.name, func(b *testing.B) {
			m, err := stage.Parse([]byte(reloadA), reloadRegistry(newReloadLedger()))
			if err != nil {
				b.Fatal(err)
			}
			if err := m.Start(context.Background()); err != nil {
				b.Fatal(err)
			}
			defer m.Shutdown(context.Background())
			cfgs := [2]*stage.Config{}
			for i, doc := range []string{bc.to, reloadA} {
				if cfgs[i], err = stage.ParseConfig([]byte(doc), ""); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				if _, err := m.Reload(cfgs[i%2]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
