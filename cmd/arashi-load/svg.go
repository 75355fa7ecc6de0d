package main

import "github.com/sandstorm-go/sandstorm/internal/svgchart"

// series is one line of a chart, as the experiments collect it: x and y
// side by side.
type series struct {
	name   string
	x, y   []float64
	dashed bool
}

// chart describes a figure of this command: a linear or base-2
// logarithmic x axis (users), a linear y axis from 0, a legend on the
// right, and optionally a horizontal reference line (a target). write
// draws it with svgchart.
type chart struct {
	title, xlabel, ylabel string
	logx                  bool
	ref                   float64 // drawn when > 0
	refLabel              string
	lines                 []series
}

func (c chart) write(path string) error {
	sc := &svgchart.Chart{Title: c.title, X: svgchart.Axis{Label: c.xlabel}, Y: svgchart.Axis{Label: c.ylabel},
		Legend: svgchart.LegendRight}
	if c.logx {
		sc.X.Scale = svgchart.Log2
	}
	if c.ref > 0 {
		sc.Refs = []svgchart.Ref{{Y: c.ref, Label: c.refLabel}}
	}
	for _, l := range c.lines {
		s := svgchart.Series{Name: l.name, Dashed: l.dashed, Marks: true}
		for i := range min(len(l.x), len(l.y)) {
			s.Points = append(s.Points, svgchart.Point{X: l.x[i], Y: l.y[i]})
		}
		sc.Series = append(sc.Series, s)
	}
	return sc.WriteFile(path)
}
