package svgtest

import (
	"bytes"
	"encoding/xml"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
)

// Elem is one element of a document.
type Elem struct {
	Name  string            // local name: svg, polyline, rect, text, ...
	Attr  map[string]string // by local name
	Text  string            // character data directly inside it
	Depth int               // 0: the root
}

// Parse fails t unless data is well-formed XML whose root is an svg
// element in the SVG namespace, and returns its elements in document
// order.
func Parse(t testing.TB, data []byte) []Elem {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(data))
	var out []Elem
	var open []int
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v", err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			if len(out) == 0 && (tok.Name.Local != "svg" || tok.Name.Space != "http://www.w3.org/2000/svg") {
				t.Fatalf("root element %v, want svg in the SVG namespace", tok.Name)
			}
			e := Elem{Name: tok.Name.Local, Attr: map[string]string{}, Depth: len(open)}
			for _, a := range tok.Attr {
				e.Attr[a.Name.Local] = a.Value
			}
			open = append(open, len(out))
			out = append(out, e)
		case xml.CharData:
			if len(open) > 0 {
				out[open[len(open)-1]].Text += string(tok)
			}
		case xml.EndElement:
			open = open[:len(open)-1]
		}
	}
	if len(out) == 0 {
		t.Fatal("empty document")
	}
	return out
}

// ParseFile is Parse of a file's contents.
func ParseFile(t testing.TB, path string) []Elem {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return Parse(t, data)
}

// Texts returns the text of every text element.
func Texts(es []Elem) []string {
	var out []string
	for _, e := range es {
		if e.Name == "text" {
			out = append(out, e.Text)
		}
	}
	return out
}

// Series returns the elements named kind (polyline, circle, rect) drawn
// for each series, by the series' name (the data-series attribute).
func Series(es []Elem, kind string) map[string][]Elem {
	out := map[string][]Elem{}
	for _, e := range es {
		if name, ok := e.Attr["data-series"]; ok && e.Name == kind {
			out[name] = append(out[name], e)
		}
	}
	return out
}

// Points returns a polyline's points.
func Points(t testing.TB, e Elem) [][2]float64 {
	t.Helper()
	var out [][2]float64
	for _, p := range strings.Fields(e.Attr["points"]) {
		xs, ys, _ := strings.Cut(p, ",")
		x, err1 := strconv.ParseFloat(xs, 64)
		y, err2 := strconv.ParseFloat(ys, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("bad point %q", p)
		}
		out = append(out, [2]float64{x, y})
	}
	return out
}
