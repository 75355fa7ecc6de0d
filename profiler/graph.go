package profiler

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"

	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// OutsideNode labels the node that stands for producers outside any stage
// (network listeners, timers, the main goroutine) in the stage graph.
const OutsideNode = "outside"

// ErrNoDot is returned by RenderSVG when Graphviz's dot is not installed.
var ErrNoDot = errors.New("profiler: graphviz dot not found")

// Dot writes the stage graph of s in Graphviz's language: a box per stage
// labelled with its name, queue length and pool size, an ellipse for the
// producers outside any stage, and an arrow per traced edge labelled with
// the number of events it carried.
//
// In a cluster (Sample.Node set) the graph is titled with this node, every
// stage's label says the nodes hosting it, and the stages hosted on other
// nodes only are dashed boxes labelled with their nodes and the numbers of
// this node's remote sink for them (admitted events per second,
// rejections, round-trip p50/p99, retransmissions, and redeliveries where
// a durable replica runs here); edges to them are dashed.
func Dot(s *Sample) []byte {
	var b bytes.Buffer
	b.WriteString("digraph sandstorm {\n\trankdir=LR;\n\tnode [shape=box, fontname=\"Helvetica\"];\n\tedge [fontname=\"Helvetica\"];\n")
	if s.Node != "" {
		fmt.Fprintf(&b, "\tlabel=%s;\n\tlabelloc=t;\n\tfontname=\"Helvetica\";\n", quote("node "+s.Node))
	}
	outside := outsideID(s)
	hasOutside := false
	for _, e := range s.Edges {
		if e.From == "" {
			hasOutside = true
			break
		}
	}
	if hasOutside {
		fmt.Fprintf(&b, "\t%s [shape=ellipse, label=%s];\n", quote(outside), quote(OutsideNode))
	}
	for _, st := range s.Stages {
		label := st.Name
		if q, ok := st.Get("queue.length"); ok {
			label += "\nqueue " + strconv.FormatFloat(q, 'f', -1, 64)
		}
		if t, ok := st.Get("pool.size"); ok {
			label += "\nthreads " + strconv.FormatFloat(t, 'f', -1, 64)
		}
		if s.Node != "" {
			label += "\n" + nodesLabel(st.Nodes)
			if r, ok := s.OtherValue("remote." + st.Name + ".redelivered"); ok {
				label += "\nredelivered " + num(r)
			}
		}
		fmt.Fprintf(&b, "\t%s [label=%s];\n", quote(st.Name), quote(label))
	}
	for _, rs := range s.Remote {
		fmt.Fprintf(&b, "\t%s [style=dashed, label=%s];\n", quote(rs.Name), quote(remoteLabel(&rs)))
	}
	for _, e := range s.Edges {
		from := e.From
		if from == "" {
			from = outside
		}
		style := ""
		_, toRemote := s.RemoteStage(e.To)
		_, fromRemote := s.RemoteStage(e.From)
		if toRemote || fromRemote {
			style = "style=dashed, "
		}
		fmt.Fprintf(&b, "\t%s -> %s [%slabel=%s];\n", quote(from), quote(e.To), style, quote(strconv.FormatUint(e.Count, 10)))
	}
	b.WriteString("}\n")
	return b.Bytes()
}

// deliverer is a remote sink (package remote's, request mode) that
// knows how many events the replicas of its stage, on other nodes,
// delivered to each stage of this node: replies coming back.
type deliverer interface {
	Delivered() map[string]uint64
}

// drawDeliveries redraws the events that stages hosted on other nodes
// delivered to this node's stages (their replicas enqueue them through
// the stages' own sinks, traced from outside) as edges from those remote
// stages. remoteSink returns a remote stage's sink.
func drawDeliveries(s *Sample, remoteSink func(name string) (sink.Sink, bool)) {
	for _, rs := range s.Remote {
		sk, ok := remoteSink(rs.Name)
		if !ok || sk == nil {
			continue
		}
		if u, ok := sk.(interface{ Unwrap() sink.Sink }); ok {
			sk = u.Unwrap()
		}
		d, ok := sk.(deliverer)
		if !ok {
			continue
		}
		for to, n := range d.Delivered() {
			if n == 0 {
				continue
			}
			for i := range s.Edges {
				if e := &s.Edges[i]; e.From == "" && e.To == to {
					e.Count -= min(e.Count, n) // counted apart, a moment apart
				}
			}
			s.Edges = append(s.Edges, stage.Edge{From: rs.Name, To: to, Count: n})
		}
	}
	s.Edges = slices.DeleteFunc(s.Edges, func(e stage.Edge) bool { return e.Count == 0 })
	slices.SortFunc(s.Edges, func(a, b stage.Edge) int {
		if c := strings.Compare(a.From, b.From); c != 0 {
			return c
		}
		return strings.Compare(a.To, b.To)
	})
}

// nodesLabel is how a graph names the nodes hosting a stage (a
// StageSample's Nodes in a cluster): "on a, b", or "on every node" for
// none.
func nodesLabel(nodes []string) string {
	if len(nodes) == 0 {
		return "on every node"
	}
	return "on " + strings.Join(nodes, ", ")
}

// remoteLabel labels a stage hosted on other nodes with its nodes and the
// numbers of this node's remote sink for it that package remote exposes.
func remoteLabel(rs *StageSample) string {
	label := rs.Name + "\n" + nodesLabel(rs.Nodes)
	get := func(name string) (string, bool) {
		v, ok := rs.Get(name)
		return num(v), ok
	}
	if n, ok := rs.Get("replicas"); ok {
		label += ", " + num(n) + " replica"
		if n != 1 {
			label += "s"
		}
	}
	var line []string
	if v, ok := get("rate.events"); ok {
		line = append(line, v+" ev/s")
	}
	if v, ok := get("rejected"); ok {
		r, _ := get("rate.rejected")
		line = append(line, "rejected "+v+" ("+r+"/s)")
	}
	if len(line) > 0 {
		label += "\n" + strings.Join(line, ", ")
	}
	p50, ok50 := get("rtt.p50.us")
	p99, ok99 := get("rtt.p99.us")
	if ok50 && ok99 {
		label += "\nrtt p50 " + p50 + "µs, p99 " + p99 + "µs"
	}
	line = line[:0]
	if v, ok := get("retransmits"); ok {
		line = append(line, "retransmits "+v)
	}
	if v, ok := get("redelivered"); ok {
		line = append(line, "redelivered "+v)
	}
	if len(line) > 0 {
		label += "\n" + strings.Join(line, ", ")
	}
	return label
}

// num formats a value of a label: integers as they are, others with one
// decimal.
func num(v float64) string {
	if v == float64(int64(v)) {
		return strconv.FormatInt(int64(v), 10)
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}

// outsideID picks a node ID for the outside producers that no stage uses.
func outsideID(s *Sample) string {
	id := "(" + OutsideNode + ")"
	for {
		if _, taken := s.Stage(id); !taken {
			return id
		}
		id += "_"
	}
}

// quote makes a Graphviz double-quoted string; newlines become \n.
func quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"', '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// DotPath returns the path of Graphviz's dot, or "" if it is not installed.
func DotPath() string {
	p, err := exec.LookPath("dot")
	if err != nil {
		return ""
	}
	return p
}

// RenderSVG runs Graphviz's dot on a graph and returns the SVG. It returns
// an error wrapping ErrNoDot when dot is not installed.
func RenderSVG(ctx context.Context, dot []byte) ([]byte, error) {
	path := DotPath()
	if path == "" {
		return nil, ErrNoDot
	}
	cmd := exec.CommandContext(ctx, path, "-Tsvg")
	cmd.Stdin = bytes.NewReader(dot)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("profiler: dot -Tsvg: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return out.Bytes(), nil
}
