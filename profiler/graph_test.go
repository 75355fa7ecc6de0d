package profiler_test

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sandstorm-go/sandstorm/profiler"
	"github.com/sandstorm-go/sandstorm/stage"
)

var (
	dotEdge = regexp.MustCompile(`^\t"((?:[^"\\]|\\.)*)" -> "((?:[^"\\]|\\.)*)" \[(?:style=dashed, )?label="(\d+)"\];$`)
	dotNode = regexp.MustCompile(`^\t"((?:[^"\\]|\\.)*)" \[(?:shape=ellipse, |style=dashed, )?label="((?:[^"\\]|\\.)*)"\];$`)
)

// parseDot returns the edges ("from -> to" with counts) and node IDs of a
// graph written by profiler.Dot.
func parseDot(t *testing.T, dot []byte) (edges map[string]uint64, nodes []string) {
	t.Helper()
	edges = map[string]uint64{}
	for _, line := range strings.Split(string(dot), "\n") {
		if m := dotEdge.FindStringSubmatch(line); m != nil {
			n, _ := strconv.ParseUint(m[3], 10, 64)
			key := m[1] + " -> " + m[2]
			if _, dup := edges[key]; dup {
				t.Fatalf("edge %s twice", key)
			}
			edges[key] = n
		} else if m := dotNode.FindStringSubmatch(line); m != nil {
			nodes = append(nodes, m[1])
		} else if strings.Contains(line, "->") {
			t.Fatalf("unparsed edge line %q", line)
		}
	}
	return edges, nodes
}

// TestPipelineGraph: the graph traced from a 3-stage pipeline has exactly
// its edges, with exact counts.
func TestPipelineGraph(t *testing.T) {
	const n = 500
	m := stage.NewManager(stage.Options{})
	stages := pipeline(t, m, stage.StageConfig{}, "Parse", "Work", "Reply")
	pipeline(t, m, stage.StageConfig{}, "Idle") // created, never used: a node without edges
	start(t, m)
	for i := 0; i < n; i++ {
		if err := stages[0].Sink().Enqueue(i); err != nil {
			t.Fatal(err)
		}
	}
	stop(t, m) // drains the pipeline

	s := newProfiler(t, m, profiler.Config{}).Sample()
	dot := profiler.Dot(&s)
	edges, nodes := parseDot(t, dot)
	want := map[string]uint64{
		"(outside) -> Parse": n,
		"Parse -> Work":      n,
		"Work -> Reply":      n,
	}
	if len(edges) != len(want) {
		t.Fatalf("edges %v, want %v\n%s", edges, want, dot)
	}
	for k, v := range want {
		if edges[k] != v {
			t.Fatalf("edge %s = %d, want %d\n%s", k, edges[k], v, dot)
		}
	}
	slices.Sort(nodes)
	if !slices.Equal(nodes, []string{"(outside)", "Idle", "Parse", "Reply", "Work"}) {
		t.Fatalf("nodes %v\n%s", nodes, dot)
	}
	if !strings.Contains(string(dot), `"Work" [label="Work\nqueue 0\nthreads `) {
		t.Fatalf("stage labels lack queue length and threads:\n%s", dot)
	}
}

func TestDotQuotesNames(t *testing.T) {
	s := profiler.Sample{
		Stages: []profiler.StageSample{{Name: `a "quoted"\ name`}, {Name: "(outside)"}},
		Edges:  []stage.Edge{{From: "", To: `a "quoted"\ name`, Count: 3}, {From: `a "quoted"\ name`, To: "(outside)", Count: 2}},
	}
	dot := profiler.Dot(&s)
	edges, nodes := parseDot(t, dot)
	// The stage called "(outside)" keeps its name; the outside producers
	// get another ID.
	want := map[string]uint64{`(outside)_ -> a \"quoted\"\\ name`: 3, `a \"quoted\"\\ name -> (outside)`: 2}
	if len(edges) != 2 || edges[`(outside)_ -> a \"quoted\"\\ name`] != 3 || edges[`a \"quoted\"\\ name -> (outside)`] != 2 {
		t.Fatalf("edges %v, want %v\n%s", edges, want, dot)
	}
	if len(nodes) != 3 {
		t.Fatalf("nodes %v\n%s", nodes, dot)
	}
	if profiler.DotPath() == "" {
		t.Log("graphviz dot not installed: not checking that dot accepts the graph")
		return
	}
	svg, err := profiler.RenderSVG(context.Background(), dot)
	if err != nil {
		t.Fatalf("dot refused the graph: %v\n%s", err, dot)
	}
	if !strings.Contains(string(svg), "a &quot;quoted&quot;\\ name") {
		t.Fatalf("rendered SVG lacks the stage name:\n%s", svg)
	}
}

func TestRenderSVG(t *testing.T) {
	s := profiler.Sample{
		Stages: []profiler.StageSample{{Name: "Recv"}, {Name: "Send"}},
		Edges:  []stage.Edge{{From: "", To: "Recv", Count: 10}, {From: "Recv", To: "Send", Count: 9}},
	}
	svg, err := profiler.RenderSVG(context.Background(), profiler.Dot(&s))
	if profiler.DotPath() == "" {
		if !errors.Is(err, profiler.ErrNoDot) {
			t.Fatalf("without dot: got %v, want ErrNoDot", err)
		}
		t.Skip("graphviz dot not installed")
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<svg", ">Recv<", ">Send<", ">outside<", ">10<", ">9<"} {
		if !strings.Contains(string(svg), want) {
			t.Errorf("SVG lacks %q", want)
		}
	}
}
