package profiler_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sandstorm-go/sandstorm/profiler"
	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// A profiler writing its profile log and stage graph while a manager runs.
func Example() {
	dir, _ := os.MkdirTemp("", "profile")
	defer os.RemoveAll(dir)

	m := stage.NewManager(stage.Options{})
	echo, _ := m.CreateStage("Echo", stage.HandlerFunc(func([]sink.Event) error { return nil }), stage.StageConfig{})
	_ = m.Start(context.Background())

	p, err := profiler.New(m, profiler.Config{
		Enabled:  true,
		Interval: time.Minute,
		File:     filepath.Join(dir, "sandstorm-profile.log"),
		Graph:    filepath.Join(dir, "sandstorm-graph.dot"),
	}, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = p.Start(context.Background()) // first sample
	for i := 0; i < 3; i++ {
		_ = echo.Sink().Enqueue(i)
	}
	_ = m.Shutdown(context.Background())
	_ = p.Shutdown(context.Background()) // last sample, graph

	f, _ := os.Open(filepath.Join(dir, "sandstorm-profile.log"))
	defer f.Close()
	recs, _ := profiler.ReadLog(f)
	last := recs[len(recs)-1]
	enq, _ := last.Get("Echo.enqueued")
	handled, _ := last.Get("Echo.handled")
	fmt.Println(len(recs), "samples; Echo enqueued", enq, "handled", handled)
	// Output: 2 samples; Echo enqueued 3 handled 3
}

// The profiler block of a configuration file.
func ExampleConfigFrom() {
	reg := stage.NewRegistry()
	reg.Register("example.Nop", func() stage.Handler { return stage.HandlerFunc(func([]sink.Event) error { return nil }) })
	m, err := stage.Parse([]byte(`
global:
  profiler: {enabled: true, interval: 500ms, http: "127.0.0.1:9090"}
stages:
  Nop: {handler: example.Nop}
`), reg)
	if err != nil {
		fmt.Println(err)
		return
	}
	cfg, err := profiler.ConfigFrom(m)
	fmt.Printf("%+v %v\n", cfg, err)
	// Output: {Enabled:true Interval:500ms File: Graph: HTTP:127.0.0.1:9090} <nil>
}

// The stage graph in Graphviz's language.
func ExampleDot() {
	s := profiler.Sample{
		Stages: []profiler.StageSample{
			{Name: "Recv", Values: []profiler.Value{{Name: "queue.length", Value: 4}}},
			{Name: "Send", Values: []profiler.Value{{Name: "queue.length", Value: 0}}},
		},
		Edges: []stage.Edge{{From: "", To: "Recv", Count: 120}, {From: "Recv", To: "Send", Count: 118}},
	}
	fmt.Print(string(profiler.Dot(&s)))
	// Output:
	// digraph sandstorm {
	// 	rankdir=LR;
	// 	node [shape=box, fontname="Helvetica"];
	// 	edge [fontname="Helvetica"];
	// 	"(outside)" [shape=ellipse, label="outside"];
	// 	"Recv" [label="Recv\nqueue 4"];
	// 	"Send" [label="Send\nqueue 0"];
	// 	"(outside)" -> "Recv" [label="120"];
	// 	"Recv" -> "Send" [label="118"];
	// }
}

// EffectiveConfig renders what /config serves: the configuration in
// force, defaults filled in, secrets redacted.
func ExampleEffectiveConfig() {
	cfg, err := stage.ParseConfig([]byte(`
global:
  profiler: {http: "127.0.0.1:9090"}
stages:
  Mail:
    handler: app.Mail
    args: {smtp: "mail.example:25", password: hunter2}
`), "app.yaml")
	if err != nil {
		panic(err)
	}
	out, err := profiler.EffectiveConfig(cfg, profiler.Config{HTTP: "127.0.0.1:9090"})
	if err != nil {
		panic(err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "http:") || strings.Contains(line, "smtp") || strings.Contains(line, "password") {
			fmt.Println(strings.TrimSpace(line))
		}
	}
	// Output:
	// http: 127.0.0.1:9090
	// smtp: "mail.example:25"
	// password: <redacted>
}
