package profiler

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
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
func Dot(s *Sample) []byte {
	var b bytes.Buffer
	b.WriteString("digraph sandstorm {\n\trankdir=LR;\n\tnode [shape=box, fontname=\"Helvetica\"];\n\tedge [fontname=\"Helvetica\"];\n")
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
		fmt.Fprintf(&b, "\t%s [label=%s];\n", quote(st.Name), quote(label))
	}
	for _, e := range s.Edges {
		from := e.From
		if from == "" {
			from = outside
		}
		fmt.Fprintf(&b, "\t%s -> %s [label=%s];\n", quote(from), quote(e.To), quote(strconv.FormatUint(e.Count, 10)))
	}
	b.WriteString("}\n")
	return b.Bytes()
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
