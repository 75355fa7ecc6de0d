package stage_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

type order struct{ ID, Qty int }

type sumHandler struct {
	mu     sync.Mutex
	sum    int
	inited bool
}

func (h *sumHandler) Init(*stage.Context) error { h.inited = true; return nil }
func (h *sumHandler) SingleThreaded()           {}
func (h *sumHandler) Handle(batch []order) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, o := range batch {
		if o.Qty < 0 {
			return stage.FailEvent(i, errors.New("negative quantity"))
		}
		h.sum += o.Qty
	}
	return nil
}

func TestTypedForwardsAndMapsFailures(t *testing.T) {
	h := &sumHandler{}
	wrapped := stage.Typed[order](h)
	if _, ok := wrapped.(stage.SingleThreaded); !ok {
		t.Error("SingleThreaded not forwarded")
	}
	if err := wrapped.(stage.Initializer).Init(nil); err != nil || !h.inited {
		t.Errorf("Init not forwarded: %v", err)
	}
	for _, tc := range []struct {
		name     string
		batch    []sink.Event
		sum      int
		failed   []int // batch indices named by EventErrors
		typeFail []int
	}{
		{name: "all typed", batch: []sink.Event{order{1, 2}, order{2, 3}}, sum: 5},
		{name: "wrong type", batch: []sink.Event{order{1, 2}, "x", order{2, 3}}, sum: 5, failed: []int{1}, typeFail: []int{1}},
		{name: "handler names index after a wrong type", batch: []sink.Event{"x", order{1, 1}, order{2, -1}}, sum: 1, failed: []int{0, 2}, typeFail: []int{0}},
		{name: "typed event fails alone", batch: []sink.Event{order{1, -1}}, failed: []int{0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h.sum = 0
			err := wrapped.HandleEvents(tc.batch)
			if h.sum != tc.sum {
				t.Errorf("sum %d, want %d", h.sum, tc.sum)
			}
			var got, typeGot []int
			var walk func(error)
			walk = func(err error) {
				var ee *stage.EventError
				if j, ok := err.(interface{ Unwrap() []error }); ok {
					for _, e := range j.Unwrap() {
						walk(e)
					}
				} else if errors.As(err, &ee) {
					got = append(got, ee.Index)
					if errors.Is(ee, stage.ErrWrongType) {
						typeGot = append(typeGot, ee.Index)
					}
				}
			}
			if err != nil {
				walk(err)
			}
			if len(got) != len(tc.failed) || len(typeGot) != len(tc.typeFail) {
				t.Fatalf("failed indices %v (wrong type %v), want %v (%v); err %v", got, typeGot, tc.failed, tc.typeFail, err)
			}
			for i := range got {
				if got[i] != tc.failed[i] {
					t.Errorf("failed indices %v, want %v", got, tc.failed)
				}
			}
		})
	}
}

func TestTypedInGraph(t *testing.T) {
	reg := stage.NewRegistry()
	reg.Register("t.Double", func() stage.Handler {
		return stage.TypedFunc(func(batch []*stage.Request[int, int]) error {
			for _, r := range batch {
				r.Reply(2 * r.Value)
			}
			return nil
		})
	})
	m, err := stage.Parse([]byte("stages:\n  Double: {handler: t.Double}\n"), reg)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer m.Shutdown(context.Background())
	st, _ := m.Stage("Double")
	if v, err := stage.Call[int, int](context.Background(), st.Sink(), 21); err != nil || v != 42 {
		t.Fatalf("Call = %d, %v", v, err)
	}
	// The wrong request type fails on its own: the caller learns at once.
	_, err = stage.Call[string, int](context.Background(), st.Sink(), "x")
	if !errors.Is(err, stage.ErrWrongType) || !errors.Is(err, stage.ErrCallFailed) {
		t.Fatalf("wrong type: %v", err)
	}
}

func TestWrapForwardsHooks(t *testing.T) {
	inner := &lifecycle{}
	var initOrder []string
	w := stage.Wrap(inner, func(*stage.Context) error { initOrder = append(initOrder, "middleware"); return nil },
		func(batch []sink.Event) error { return inner.HandleEvents(batch) })
	if _, ok := w.(stage.SingleThreaded); ok {
		t.Error("Wrap made a reentrant handler SingleThreaded")
	}
	if _, ok := stage.Wrap(stage.Typed[order](&sumHandler{}), nil, nil).(stage.SingleThreaded); !ok {
		t.Error("Wrap dropped SingleThreaded")
	}
	m := stage.NewManager(stage.Options{})
	if _, err := m.CreateStage("W", w, stage.StageConfig{}); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := m.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(initOrder) != 1 || inner.inits.Load() != 1 || inner.destroys.Load() != 1 {
		t.Errorf("middleware init %v, inner init %d destroy %d", initOrder, inner.inits.Load(), inner.destroys.Load())
	}
}
