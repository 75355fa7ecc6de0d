// Package svgchart writes the project's figures as standalone SVG: line
// charts (Chart: linear or logarithmic axes, a right-hand axis, steps,
// gaps, reference lines), grouped bar charts (BarChart) and rows of
// either (Figure). The commands that draw the thesis's figures
// (cmd/sandstorm-plot, cmd/arashi-load, cmd/gnutella-load) all use it.
//
// Start with a Chart and its WriteFile. Every element a series draws
// carries a data-series attribute with the series' name, so tests (and
// scripts) find the lines and bars without guessing at coordinates.
//
// It does not do interaction, animation, stacking or dates: x is a
// number, and a caller with times converts them (seconds since a start).
package svgchart
