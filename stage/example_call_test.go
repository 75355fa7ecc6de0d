package stage_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// ExampleCall is request-reply: the caller enqueues a typed request and
// waits for the stage's answer with its own context. Rejection, failure
// and timeout come back as distinct errors.
func ExampleCall() {
	m := stage.NewManager(stage.Options{})
	upper, _ := m.CreateStage("Upper", stage.TypedFunc(func(batch []*stage.Request[string, string]) error {
		for _, r := range batch {
			if r.Value == "" {
				r.Fail(errors.New("empty name"))
				continue
			}
			r.Reply(strings.ToUpper(r.Value))
		}
		return nil
	}), stage.StageConfig{})
	_ = m.Start(context.Background())
	defer m.Shutdown(context.Background())

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, name := range []string{"sandstorm", ""} {
		got, err := stage.Call[string, string](ctx, upper.Sink(), name)
		switch {
		case errors.Is(err, sink.ErrRejected):
			fmt.Println("overloaded, try later") // HTTP: 503
		case errors.Is(err, context.DeadlineExceeded):
			fmt.Println("timed out") // HTTP: 504
		case errors.Is(err, stage.ErrCallFailed):
			fmt.Println("failed:", err) // HTTP: 500
		default:
			fmt.Println(got)
		}
	}
	// Output:
	// SANDSTORM
	// failed: stage: call failed: empty name
}

// ExampleTyped wraps a handler written for one event type; its stage is
// wired and registered like any other.
func ExampleTyped() {
	reg := stage.NewRegistry()
	reg.Register("example.Square", func() stage.Handler {
		return stage.TypedFunc(func(batch []*stage.Request[int, int]) error {
			for _, r := range batch {
				r.Reply(r.Value * r.Value)
			}
			return nil
		})
	})
	m, err := stage.Parse([]byte("stages:\n  Square: {handler: example.Square, queue: {threshold: 100}}\n"), reg)
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = m.Start(context.Background())
	defer m.Shutdown(context.Background())
	sq, _ := m.Stage("Square")
	v, err := stage.Call[int, int](context.Background(), sq.Sink(), 7)
	fmt.Println(v, err)
	// Output: 49 <nil>
}

// ExampleLoad builds a manager from a YAML file; a mistake in the file is
// reported with its file, line and key, and a "did you mean" where one
// fits.
func ExampleLoad() {
	reg := stage.NewRegistry()
	reg.Register("example.Echo", func() stage.Handler {
		return stage.HandlerFunc(func([]sink.Event) error { return nil })
	})
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "app.yaml")
	_ = os.WriteFile(path, []byte("stages:\n  Echo:\n    handler: example.Echo\n    queue: {treshold: 10}\n"), 0o644)

	_, err := stage.Load(path, reg)
	fmt.Println(strings.ReplaceAll(err.Error(), dir+string(filepath.Separator), ""))

	_ = os.WriteFile(path, []byte("stages:\n  Echo:\n    handler: example.Echo\n    queue: {threshold: 10}\n"), 0o644)
	m, err := stage.Load(path, reg)
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = m.Start(context.Background())
	_ = m.Shutdown(context.Background())
	echo, _ := m.Stage("Echo")
	fmt.Println(echo.Name(), "loaded and stopped")
	// Output:
	// app.yaml: line 4: stages.Echo.queue.treshold: unknown key (did you mean "threshold"? known: burst, dispatch, max_time, threshold)
	// Echo loaded and stopped
}

// ExampleManager_Monitor has a stage's failures delivered as events to
// another stage.
func ExampleManager_Monitor() {
	m := stage.NewManager(stage.Options{})
	_, _ = m.CreateStage("Work", stage.HandlerFunc(func([]sink.Event) error {
		return errors.New("disk full")
	}), stage.StageConfig{})
	seen := make(chan string, 1)
	watch, _ := m.CreateStage("Watch", stage.HandlerFunc(func(batch []sink.Event) error {
		for _, e := range batch {
			if f, ok := e.(stage.StageFailed); ok {
				seen <- fmt.Sprintf("%s failed: %v", f.Stage, f.Err)
			}
		}
		return nil
	}), stage.StageConfig{})
	cancel, _ := m.Monitor("Work", watch.Sink())
	defer cancel()
	_ = m.Start(context.Background())
	defer m.Shutdown(context.Background())

	work, _ := m.Stage("Work")
	_ = work.Sink().Enqueue("job")
	fmt.Println(<-seen)
	// Output: Work failed: disk full
}

// ExampleManager_Shutdown stops intake, lets every queued event be
// handled, then stops, like http.Server.Shutdown; the context bounds the
// wait.
func ExampleManager_Shutdown() {
	m := stage.NewManager(stage.Options{})
	handled := 0
	st, _ := m.CreateStage("Count", stage.HandlerFunc(func(batch []sink.Event) error {
		handled += len(batch)
		return nil
	}), stage.StageConfig{ThreadPool: stage.ThreadPoolConfig{Max: 1}})
	_ = m.Start(context.Background())
	for i := 0; i < 100; i++ {
		_ = st.Sink().Enqueue(i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.Shutdown(ctx); err != nil {
		fmt.Println(err)
	}
	fmt.Println("handled", handled)
	fmt.Println(errors.Is(st.Sink().Enqueue(0), sink.ErrClosed))
	// Output:
	// handled 100
	// true
}

// ExampleEnqueueWait is the back-pressure alternative to shedding load: a
// producer outside any stage waits while the stage's queue is full.
func Example_enqueueWait() {
	m := stage.NewManager(stage.Options{})
	sum := 0
	st, _ := m.CreateStage("Sum", stage.TypedFunc(func(batch []int) error {
		for _, v := range batch {
			sum += v
		}
		return nil
	}), stage.StageConfig{Queue: stage.QueueConfig{Threshold: 4}, ThreadPool: stage.ThreadPoolConfig{Max: 1}})
	_ = m.Start(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := 1; i <= 100; i++ {
		if err := sink.EnqueueWait(ctx, st.Sink(), i); err != nil {
			fmt.Println(err)
			return
		}
	}
	_ = m.Shutdown(ctx)
	fmt.Println(sum)
	// Output: 5050
}
