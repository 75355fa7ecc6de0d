package profiler_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	metrics "github.com/rcrowley/go-metrics"

	"github.com/sandstorm-go/sandstorm/profiler"
	"github.com/sandstorm-go/sandstorm/stage"
)

// clusterSample is the sample of node "front" of a cluster: HttpRecv on
// front, Cache on every node, Checksum on w1 and w2 only.
func clusterSample() profiler.Sample {
	return profiler.Sample{
		Node: "front",
		Stages: []profiler.StageSample{
			{Name: "HttpRecv", Nodes: []string{"front"}, Values: []profiler.Value{{Name: "queue.length", Value: 2}}},
			{Name: "Cache", Values: []profiler.Value{{Name: "queue.length", Value: 0}}},
		},
		Other: []profiler.Value{{Name: "remote.Cache.redelivered", Value: 4}},
		Remote: []profiler.StageSample{{Name: "Checksum", Nodes: []string{"w1", "w2"}, Values: []profiler.Value{
			{Name: "events", Value: 90}, {Name: "rate.events", Value: 12.5}, {Name: "rate.rejected", Value: 0.5},
			{Name: "redelivered", Value: 1}, {Name: "rejected", Value: 3}, {Name: "retransmits", Value: 2},
			{Name: "rtt.p50.us", Value: 57}, {Name: "rtt.p99.us", Value: 264},
		}}},
		Edges: []stage.Edge{{From: "", To: "HttpRecv", Count: 100}, {From: "HttpRecv", To: "Cache", Count: 100}, {From: "HttpRecv", To: "Checksum", Count: 90}},
	}
}

// A stage graph seen from one node of a cluster.
func ExampleDot_cluster() {
	s := clusterSample()
	fmt.Print(string(profiler.Dot(&s)))
	// Output:
	// digraph sandstorm {
	// 	rankdir=LR;
	// 	node [shape=box, fontname="Helvetica"];
	// 	edge [fontname="Helvetica"];
	// 	label="node front";
	// 	labelloc=t;
	// 	fontname="Helvetica";
	// 	"(outside)" [shape=ellipse, label="outside"];
	// 	"HttpRecv" [label="HttpRecv\nqueue 2\non front"];
	// 	"Cache" [label="Cache\nqueue 0\non every node\nredelivered 4"];
	// 	"Checksum" [style=dashed, label="Checksum\non w1, w2\n12.5 ev/s, rejected 3 (0.5/s)\nrtt p50 57µs, p99 264µs\nretransmits 2, redelivered 1"];
	// 	"(outside)" -> "HttpRecv" [label="100"];
	// 	"HttpRecv" -> "Cache" [label="100"];
	// 	"HttpRecv" -> "Checksum" [style=dashed, label="90"];
	// }
}

// TestDotClusterParses: the cluster graph keeps its edges and nodes, a
// stage hosted elsewhere is a node of its own (not one dot invents from an
// edge), and dot accepts it.
func TestDotClusterParses(t *testing.T) {
	s := clusterSample()
	dot := profiler.Dot(&s)
	edges, nodes := parseDot(t, dot)
	if len(edges) != 3 || edges["HttpRecv -> Checksum"] != 90 {
		t.Fatalf("edges %v\n%s", edges, dot)
	}
	slices.Sort(nodes)
	if !slices.Equal(nodes, []string{"(outside)", "Cache", "Checksum", "HttpRecv"}) {
		t.Fatalf("nodes %v\n%s", nodes, dot)
	}
	if profiler.DotPath() == "" {
		t.Log("graphviz dot not installed: not rendering")
		return
	}
	svg, err := profiler.RenderSVG(t.Context(), dot)
	if err != nil {
		t.Fatalf("dot refused the graph: %v\n%s", err, dot)
	}
	for _, want := range []string{">node front<", ">on w1, w2<", ">on front<", `stroke-dasharray`} {
		if !strings.Contains(string(svg), want) {
			t.Errorf("SVG lacks %q", want)
		}
	}
}

// TestDotNoClusterUnchanged: without a node, nothing of the cluster shows,
// even when remote metrics and nodes are present.
func TestDotNoClusterUnchanged(t *testing.T) {
	s := clusterSample()
	s.Node, s.Remote = "", nil
	got := string(profiler.Dot(&s))
	s.Stages[0].Nodes, s.Other = nil, nil
	s.Edges = s.Edges[:2]
	want := string(profiler.Dot(&s))
	if strings.Contains(got, "on ") || strings.Contains(got, "dashed") || strings.Contains(got, "label=\"node") ||
		strings.Contains(got, "redelivered") {
		t.Fatalf("cluster-less graph shows cluster details:\n%s", got)
	}
	if !strings.HasPrefix(got, strings.TrimSuffix(want, "}\n")) {
		t.Fatalf("graph\n%s\ndoes not start as\n%s", got, want)
	}
}

const clusterYAML = `
stages:
  HttpRecv: {handler: Forward, nodes: [front]}
  Cache: {handler: Forward}
  Checksum: {handler: Forward, nodes: [w1, w2]}
`

// TestSampleClusterNodes: a manager that is node "front" of a cluster gets
// samples whose stages carry their nodes and whose Remote lists the stage
// hosted elsewhere with its remote sink's metrics and derived rates; the
// dashboard's JSON carries them too.
func TestSampleClusterNodes(t *testing.T) {
	reg := stage.NewRegistry()
	reg.Register("Forward", func() stage.Handler { return &forward{} })
	cfg, err := stage.ParseConfig([]byte(clusterYAML), "cluster.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Node = "front" // as package remote sets it
	m, err := stage.NewFromConfig(cfg, reg, stage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.CreateStage("Extra", &forward{}, stage.StageConfig{}); err != nil {
		t.Fatal(err)
	}
	events := metrics.NewCounter()
	for name, v := range map[string]metrics.Counter{"events": events, "rejected": newCounter(3), "retransmits": newCounter(2)} {
		if err := m.Metrics().Register("remote.Checksum."+name, v); err != nil {
			t.Fatal(err)
		}
	}
	start(t, m)
	p := newProfiler(t, m, profiler.Config{})
	events.Inc(10)
	p.Sample()
	events.Inc(10)
	s := p.Sample()

	if s.Node != "front" {
		t.Fatalf("Node %q", s.Node)
	}
	for name, want := range map[string][]string{"HttpRecv": {"front"}, "Cache": nil, "Extra": {"front"}} {
		st, ok := s.Stage(name)
		if !ok || !slices.Equal(st.Nodes, want) {
			t.Fatalf("stage %s: %+v, want nodes %v", name, st, want)
		}
	}
	if _, ok := s.Stage("Checksum"); ok || len(s.Remote) != 1 {
		t.Fatalf("stages %+v remote %+v", s.Stages, s.Remote)
	}
	rs, ok := s.RemoteStage("Checksum")
	if !ok || !slices.Equal(rs.Nodes, []string{"w1", "w2"}) {
		t.Fatalf("remote %+v", s.Remote)
	}
	for name, want := range map[string]float64{"events": 20, "rejected": 3, "retransmits": 2, "rate.rejected": 0} {
		if v, ok := rs.Get(name); !ok || v != want {
			t.Errorf("Checksum %s = %v (%v), want %v", name, v, ok, want)
		}
	}
	if v, ok := rs.Get("rate.events"); !ok || v <= 0 {
		t.Errorf("Checksum rate.events = %v (%v), want > 0 after 10 more events", v, ok)
	}
	dot := string(profiler.Dot(&s))
	for _, want := range []string{`label="node front"`, `"HttpRecv" [label="HttpRecv\nqueue 0\nthreads 1\non front"]`,
		`"Checksum" [style=dashed, label="Checksum\non w1, w2\n`} {
		if !strings.Contains(dot, want) {
			t.Errorf("graph lacks %s:\n%s", want, dot)
		}
	}

	rec := httptest.NewRecorder()
	p.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, profiler.MetricsPath, nil))
	var doc struct {
		Sample struct {
			Node   string
			Stages []struct {
				Name  string
				Nodes []string
			}
			Remote []struct {
				Name   string
				Nodes  []string
				Values map[string]float64
			}
		}
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil {
		t.Fatalf("%v\n%s", err, rec.Body)
	}
	if doc.Sample.Node != "front" || len(doc.Sample.Remote) != 1 || doc.Sample.Remote[0].Name != "Checksum" ||
		!slices.Equal(doc.Sample.Remote[0].Nodes, []string{"w1", "w2"}) || doc.Sample.Remote[0].Values["retransmits"] != 2 ||
		doc.Sample.Stages[0].Name != "HttpRecv" || !slices.Equal(doc.Sample.Stages[0].Nodes, []string{"front"}) {
		t.Fatalf("metrics.json: %+v\n%s", doc.Sample, rec.Body)
	}
}

// TestSampleNoCluster: outside a cluster no sample carries nodes or remote
// stages, and the JSON has no cluster keys.
func TestSampleNoCluster(t *testing.T) {
	reg := stage.NewRegistry()
	reg.Register("Forward", func() stage.Handler { return &forward{} })
	m, err := stage.Parse([]byte(clusterYAML), reg)
	if err != nil {
		t.Fatal(err)
	}
	start(t, m)
	p := newProfiler(t, m, profiler.Config{})
	s := p.Sample()
	if s.Node != "" || s.Remote != nil || len(s.Stages) != 3 {
		t.Fatalf("sample %+v", s)
	}
	for _, st := range s.Stages {
		if st.Nodes != nil {
			t.Fatalf("stage %s has nodes %v", st.Name, st.Nodes)
		}
	}
	rec := httptest.NewRecorder()
	p.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, profiler.MetricsPath, nil))
	for _, key := range []string{`"node"`, `"nodes"`, `"remote"`} {
		if strings.Contains(rec.Body.String(), key) {
			t.Fatalf("metrics.json has %s:\n%s", key, rec.Body)
		}
	}
}
