package stage_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
	"github.com/sandstorm-go/sandstorm/threadpool"
)

// nopStage is a threadpool.Stage that is never run.
type nopStage struct{}

func (nopStage) Name() string                          { return "nop" }
func (nopStage) Queue() *sink.Queue                    { return sink.NewQueue(0) }
func (nopStage) BatchSize() int                        { return 1 }
func (nopStage) RunBatch(_, _ []sink.Event, _ []int64) {}

// TestConfigWhirlwindController: `controller: {type: whirlwind, ...}` sizes
// the stage's pool with the Whirlwind controller and its thresholds; a
// stage inherits the type from global:, and the default is the thesis's.
func TestConfigWhirlwindController(t *testing.T) {
	const doc = `
global:
  threadpool: {max: 8, controller: {type: whirlwind, lockLatency: 2ms}}
stages:
  A:
    handler: test.Echo
    threadpool: {controller: {idleTime: 100ms, queueLatency: 30ms}}
  B:
    handler: test.Echo
    threadpool: {controller: {type: seda, queueThreshold: 10}}
`
	m, err := stage.Parse([]byte(doc), testRegistry(nil))
	if err != nil {
		t.Fatal(err)
	}
	a, _ := m.Stage("A")
	w, ok := a.Pool().Sizer().(*threadpool.Whirlwind)
	if !ok {
		t.Fatalf("A's sizer is %T, want *threadpool.Whirlwind", a.Pool().Sizer())
	}
	want := threadpool.WhirlwindConfig{IdleTime: 100 * time.Millisecond, QueueLatency: 30 * time.Millisecond, LockLatency: 2 * time.Millisecond}
	if got := w.Config(); got != want {
		t.Fatalf("A's thresholds %+v, want %+v", got, want)
	}
	b, _ := m.Stage("B")
	if c, ok := b.Pool().Sizer().(*threadpool.Controller); !ok || c.Config().QueueThreshold != 10 {
		t.Fatalf("B's sizer is %T, want the thesis's Controller with queueThreshold 10", b.Pool().Sizer())
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := m.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestConfigControllerErrors: every mistake in a controller block is
// reported at its line and key.
func TestConfigControllerErrors(t *testing.T) {
	tests := []struct {
		name, block string
		want        string // the whole located message
	}{
		{"unknown type", `{type: wirlwind}`,
			`x.yaml: line 5: stages.A.threadpool.controller.type: type "wirlwind" is unknown (known: seda, whirlwind)`},
		{"negative queue latency", `{type: whirlwind, queueLatency: -1ms}`,
			`x.yaml: line 5: stages.A.threadpool.controller.queueLatency: queueLatency -1ms is negative`},
		{"negative idle time", `{type: whirlwind, idleTime: -1s}`,
			`x.yaml: line 5: stages.A.threadpool.controller.idleTime: idleTime -1s is negative`},
		{"negative lock latency", `{type: whirlwind, lockLatency: -5ms}`,
			`x.yaml: line 5: stages.A.threadpool.controller.lockLatency: lockLatency -5ms is negative`},
		{"bad duration", `{type: whirlwind, lockLatency: 5}`,
			`x.yaml: line 5: stages.A.threadpool.controller.lockLatency: bad duration "5" (want e.g. 500ms, 2s, 1m)`},
		{"seda key under whirlwind", `{type: whirlwind, queueThreshold: 10}`,
			`x.yaml: line 5: stages.A.threadpool.controller.queueThreshold: queueThreshold does not apply to controller type whirlwind`},
		{"whirlwind key under seda", `{queueLatency: 10ms}`,
			`x.yaml: line 5: stages.A.threadpool.controller.queueLatency: queueLatency does not apply to controller type seda`},
		{"typo", `{type: whirlwind, queueLatncy: 10ms}`,
			`x.yaml: line 5: stages.A.threadpool.controller.queueLatncy: unknown key (did you mean "queueLatency"?`},
		{"negative interval keeps its key", `{type: whirlwind, interval: -1s}`,
			`x.yaml: line 5: stages.A.threadpool.controller.interval: interval -1s is negative`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := "stages:\n  A:\n    handler: test.Echo\n    threadpool:\n      controller: " + tt.block + "\n"
			_, err := stage.ParseConfig([]byte(doc), "x.yaml")
			if err == nil {
				t.Fatalf("parsed %s, want an error", tt.block)
			}
			if !errors.Is(err, stage.ErrInvalidConfig) {
				t.Fatalf("error %v does not wrap ErrInvalidConfig", err)
			}
			if !strings.HasPrefix(err.Error(), tt.want) {
				t.Fatalf("error\n  %v\nwant\n  %s", err, tt.want)
			}
		})
	}
}

// TestStageConfigNewSizer: a stage created from Go runs the developer's own
// controller (ControllerConfig.NewSizer).
func TestStageConfigNewSizer(t *testing.T) {
	m := stage.NewManager(stage.Options{})
	var bounds [2]int
	own := threadpool.SizerFunc(func(s threadpool.Sample) int { return s.Size })
	st, err := m.CreateStage("Own", stage.HandlerFunc(func([]sink.Event) error { return nil }), stage.StageConfig{
		ThreadPool: stage.ThreadPoolConfig{Max: 3, Controller: threadpool.ControllerConfig{
			NewSizer: func(min, max int) threadpool.Sizer { bounds = [2]int{min, max}; return own },
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := st.Pool().Sizer().(threadpool.SizerFunc); !ok || bounds != [2]int{1, 3} {
		t.Fatalf("sizer %T made for bounds %v, want the SizerFunc for [1 3]", st.Pool().Sizer(), bounds)
	}
}

// FuzzConfigController: any controller block either parses into a
// configuration a pool accepts, or fails with a located error.
func FuzzConfigController(f *testing.F) {
	for _, s := range []string{
		`{type: whirlwind, idleTime: 50ms, queueLatency: 20ms, lockLatency: 5ms}`,
		`{type: seda, queueThreshold: 100, idle: 5s}`,
		`{type: whirlwind, queueThreshold: 1}`,
		`{type: x}`,
		`{interval: -1s}`,
		`{type: whirlwind, enabled: false, interval: 100ms}`,
		`[1, 2]`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, block string) {
		doc := "stages:\n  A:\n    handler: test.Echo\n    threadpool:\n      max: 4\n      controller: " + block + "\n"
		cfg, err := stage.ParseConfig([]byte(doc), "fuzz.yaml")
		if err != nil {
			if !errors.Is(err, stage.ErrInvalidConfig) || !strings.HasPrefix(err.Error(), "fuzz.yaml: ") {
				t.Fatalf("error %q is not a located config error", err)
			}
			return
		}
		for _, s := range cfg.Stages {
			c := s.Config.ThreadPool.Controller
			if err := c.Validate(); err != nil {
				t.Fatalf("accepted an invalid controller %+v: %v", c, err)
			}
			// NewPool panics on what Validate would reject.
			threadpool.NewPool(nopStage{}, threadpool.Config{Max: 4, Controller: c})
		}
	})
}
