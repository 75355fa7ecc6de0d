// Package svgtest reads the SVG that svgchart writes, for tests: it
// checks the document is well-formed SVG and returns its elements, so a
// test counts the lines, bars and labels a figure holds instead of
// matching its text.
package svgtest
