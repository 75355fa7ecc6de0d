package profiler_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

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

// chromiumPath finds a Chromium binary.
func chromiumPath() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless_shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// artifactDir is where the browser test leaves its screenshot:
// $SANDSTORM_ARTIFACTS if set, else a temporary directory.
func artifactDir(t *testing.T) string {
	if d := os.Getenv("SANDSTORM_ARTIFACTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

// TestDashboardInBrowser loads the dashboard of a running manager with busy
// stages in headless Chromium and checks the DOM: every stage is named and
// the plots grew while the page polled.
func TestDashboardInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test skipped in -short mode")
	}
	chromium := chromiumPath()
	if chromium == "" {
		t.Skip("chromium not installed (apt-get install chromium): dashboard browser test skipped")
	}

	m := stage.NewManager(stage.Options{})
	names := []string{"HttpRecv", "PageCache", "CacheMiss", "HttpSend"}
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
	// Let a few samples accumulate (a wait, not a measurement).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if s, _ := p.Latest(); s.Seq >= 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the profiler took no samples in 10 s")
		}
	}
	url := "http://" + p.Addr().String() + profiler.DashboardPath
	dir := artifactDir(t)

	run := func(url string, extra ...string) []byte {
		t.Helper()
		cctx, ccancel := context.WithTimeout(context.Background(), 25*time.Second)
		defer ccancel()
		args := append([]string{
			"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
			"--hide-scrollbars", "--user-data-dir=" + t.TempDir(), "--virtual-time-budget=3000",
		}, extra...)
		args = append(args, url)
		cmd := exec.CommandContext(cctx, chromium, args...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("chromium %v: %v\n%s", extra, err, stderr.String())
		}
		return out
	}

	dom := string(run(url, "--dump-dom"))
	if err := os.WriteFile(filepath.Join(dir, "dashboard.html"), []byte(dom), 0o644); err != nil {
		t.Fatal(err)
	}
	body := regexp.MustCompile(`<body[^>]*>`).FindString(dom)
	attr := func(name string) string {
		m := regexp.MustCompile(name + `="([^"]*)"`).FindStringSubmatch(body)
		if m == nil {
			t.Fatalf("body has no %s: %s", name, body)
		}
		return m[1]
	}
	num := func(name string) int {
		n, err := strconv.Atoi(attr(name))
		if err != nil {
			t.Fatalf("%s = %q", name, attr(name))
		}
		return n
	}
	if got := attr("data-stages"); got != strings.Join(names, ",") {
		t.Errorf("data-stages = %q, want %q", got, strings.Join(names, ","))
	}
	for _, n := range names {
		// in the table, in the plot legends and in the graph
		if c := strings.Count(dom, ">"+n+"<"); c < 3 {
			t.Errorf("stage %s appears %d times in the DOM, want ≥ 3", n, c)
		}
	}
	if num("data-updates") < 1 || num("data-samples") < 2 {
		t.Errorf("the plots did not move: %s", body)
	}
	if !regexp.MustCompile(`id="status"[^>]*>live<`).MatchString(dom) {
		t.Errorf("status is not live")
	}
	// Every plot has a line with points for every stage.
	lines := regexp.MustCompile(`<polyline points="([^"]*)"[^>]*data-stage="([^"]*)"`).FindAllStringSubmatch(dom, -1)
	if len(lines) != 6*len(names) {
		t.Errorf("%d plot lines, want %d", len(lines), 6*len(names))
	}
	for _, l := range lines {
		if strings.Count(l[1], ",") < 2 {
			t.Errorf("line of %s has fewer than 2 points: %q", l[2], l[1])
		}
	}
	graphKind := "js"
	if profiler.DotPath() != "" {
		graphKind = "dot"
	}
	if !strings.Contains(dom, `data-layout="`+graphKind+`"`) {
		t.Errorf("stage graph with %s layout missing", graphKind)
	}
	if graphKind == "dot" {
		// The page's own layout, used where the server has no dot.
		js := string(run(url+"?graph=js", "--dump-dom"))
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
	t.Logf("dashboard: %s", body)

	shot := filepath.Join(dir, "dashboard.png")
	run(url, "--screenshot="+shot, "--window-size=1280,1500")
	if st, err := os.Stat(shot); err != nil || st.Size() < 10_000 {
		t.Fatalf("screenshot %s: %v", shot, err)
	}
	t.Logf("screenshot: %s", shot)
}
