package profiler_test

import (
	"context"
	"errors"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/internal/browsertest"
	"github.com/sandstorm-go/sandstorm/profiler"
	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
	"github.com/sandstorm-go/sandstorm/threadpool"
)

// slow is a handler that takes a little time per batch, so that queues
// build up and the plots have something to show.
type slow struct {
	forward
	pause time.Duration
}

func (s *slow) HandleEvents(batch []sink.Event) error {
	time.Sleep(s.pause)
	return s.forward.HandleEvents(batch)
}

// TestDashboardInBrowser loads the dashboard of a running manager with busy
// stages in headless Chromium and checks the DOM: every stage is named and
// the plots grew while the page polled.
func TestDashboardInBrowser(t *testing.T) {
	browser := browsertest.New(t) // skips without chromium

	m := stage.NewManager(stage.Options{})
	names := []string{"Ingest", "Parse", "Transform", "Store"}
	var stages []*stage.Stage
	for i, n := range names {
		next := ""
		if i+1 < len(names) {
			next = names[i+1]
		}
		st, err := m.CreateStage(n, &slow{forward: forward{next: next}, pause: time.Duration(i+1) * time.Millisecond},
			stage.StageConfig{
				Batching: stage.BatchingConfig{Max: 8},
				Queue:    stage.QueueConfig{Threshold: 200},
				ThreadPool: stage.ThreadPoolConfig{Max: 4, Controller: threadpool.ControllerConfig{
					Enabled: true, Interval: 100 * time.Millisecond, QueueThreshold: 50}},
			})
		if err != nil {
			t.Fatal(err)
		}
		stages = append(stages, st)
	}
	start(t, m)

	// A producer keeps the stages busy until the test ends.
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				for j := 0; j < 10; j++ {
					if err := stages[0].Sink().Enqueue(i); errors.Is(err, sink.ErrClosed) {
						return
					}
				}
			}
		}
	}()
	defer wg.Wait()
	defer cancel()

	p := newProfiler(t, m, profiler.Config{HTTP: "127.0.0.1:0", Interval: 100 * time.Millisecond})
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	browsertest.WaitSample(t, p, 5)
	// Live, and its plots move (a later load holds more samples); the
	// graph checks below read the first load.
	dom, url := browser.CheckLiveDashboard(p, names, 3, "profiler-dashboard")
	graphKind := "js"
	if profiler.DotPath() != "" {
		graphKind = "dot"
	}
	if !strings.Contains(dom, `data-layout="`+graphKind+`"`) {
		t.Errorf("stage graph with %s layout missing", graphKind)
	}
	if graphKind == "dot" {
		// The page's own layout, used where the server has no dot.
		js := browser.DOM(url + "?graph=js")
		graph := regexp.MustCompile(`(?s)<svg[^>]*data-layout="js".*?</svg>`).FindString(js)
		if graph == "" {
			t.Fatal("no stage graph drawn by the page")
		}
		for _, n := range append([]string{"outside"}, names...) {
			if !strings.Contains(graph, `data-node="`+n+`"`) || !strings.Contains(graph, ">"+n+"<") {
				t.Errorf("page-drawn graph lacks node %s", n)
			}
		}
		if arrows := strings.Count(graph, `marker-end="url(#arrow)"`); arrows != len(names) {
			t.Errorf("page-drawn graph has %d edges, want %d", arrows, len(names))
		}
	}
}

// TestClusterDashboardInBrowser loads the dashboard of node "front" of a
// cluster: the header names the node, both graph layouts label the stages
// with their nodes, and the stage hosted elsewhere is drawn dashed with its
// remote sink's numbers.
func TestClusterDashboardInBrowser(t *testing.T) {
	browser := browsertest.New(t) // skips without chromium

	reg := stage.NewRegistry()
	reg.Register("Recv", func() stage.Handler { return &forward{next: "Checksum"} })
	reg.Register("Forward", func() stage.Handler { return &forward{} })
	cfg, err := stage.ParseConfig([]byte(`
stages:
  HttpRecv: {handler: Recv, nodes: [front]}
  Cache: {handler: Forward}
  Checksum: {handler: Forward, nodes: [w1, w2]}
`), "cluster.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Node = "front" // as package remote sets it
	m, err := stage.NewFromConfig(cfg, reg, stage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Checksum's remote sink is a plain queue here, with the metrics
	// package remote would register for it.
	if err := m.SetRemoteSink("Checksum", sink.NewQueue(1000)); err != nil {
		t.Fatal(err)
	}
	if err := m.Metrics().Register("remote.Checksum.retransmits", newCounter(7)); err != nil {
		t.Fatal(err)
	}
	start(t, m)
	recv, _ := m.Stage("HttpRecv")
	for i := range 20 {
		if err := recv.Sink().Enqueue(i); err != nil {
			t.Fatal(err)
		}
	}

	p := newProfiler(t, m, profiler.Config{HTTP: "127.0.0.1:0", Interval: 100 * time.Millisecond})
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	browsertest.WaitSample(t, p, 3)
	url := "http://" + p.Addr().String() + profiler.DashboardPath

	dom := browser.DOM(url + "?graph=js")
	browsertest.SaveArtifact(t, "profiler-cluster-dashboard.html", []byte(dom))
	if !strings.Contains(dom, `<b id="node">front</b>`) {
		t.Errorf("header does not name the node: %s", browsertest.Body(dom))
	}
	graph := regexp.MustCompile(`(?s)<svg[^>]*data-layout="js".*?</svg>`).FindString(dom)
	for _, want := range []string{`data-node="HttpRecv" data-nodes="front"`, `data-node="Cache" data-nodes=""`, ">on every node<",
		`data-node="Checksum" data-remote="true" data-nodes="w1,w2"`, ">on w1, w2<", "retransmits 7", `data-remote="true"`} {
		if !strings.Contains(graph, want) {
			t.Errorf("page-drawn graph lacks %s:\n%s", want, graph)
		}
	}
	if dashed := strings.Count(graph, `stroke-dasharray="5 3" data-remote="true"`); dashed != 1 {
		t.Errorf("page-drawn graph has %d dashed edges, want 1 (HttpRecv -> Checksum)", dashed)
	}
	if profiler.DotPath() != "" {
		dom = browser.DOM(url)
		graph = regexp.MustCompile(`(?s)<svg[^>]*data-layout="dot".*?</svg>`).FindString(dom)
		for _, want := range []string{">node front<", ">on front<", ">on w1, w2<", "retransmits 7"} {
			if !strings.Contains(graph, want) {
				t.Errorf("dot-drawn graph lacks %s:\n%s", want, graph)
			}
		}
	}
	shot := filepath.Join(browsertest.ArtifactDir(t), "profiler-cluster-dashboard.png")
	browser.Screenshot(url+"?graph=js", shot, 1280, 900)
	t.Logf("screenshot: %s", shot)
}
