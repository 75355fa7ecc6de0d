package profiler

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The profile log is plain text, one line per sample, ready for gnuplot:
//
//	# sandstorm profile started 2026-01-02T15:04:05Z interval 1s
//	# columns 1:time 3:mem.heap 5:mem.total 7:goroutines 9:gc.cycles 11:Echo.batch.size.max ...
//	1767366245.123 mem.heap 123456 mem.total 4567890 goroutines 12 gc.cycles 3 Echo.batch.size.max 64 ...
//
// Column 1 is the Unix time in seconds; then come name/value pairs, so the
// value of the k-th pair (k from 0) is in column 3+2k. The "# columns" line
// names the value columns; a new one is written whenever the set of columns
// changes (a stage was created or destroyed, a handler registered a value,
// a predicate was replaced), so a plot must use the column numbers of the
// header above the lines it plots. Names carry no blanks: a blank in a stage
// name is written as '_'. NaN and ±Inf are written as NaN, +Inf and -Inf.

// ErrBadLog is wrapped by ReadLog's errors.
var ErrBadLog = errors.New("profiler: malformed profile log")

// Record is one sample read back from a profile log.
type Record struct {
	Time   time.Time
	Values []Value // in line order, full names ("Echo.queue.length")
}

// Get returns the record's value called name.
func (r *Record) Get(name string) (float64, bool) {
	for _, v := range r.Values {
		if v.Name == name {
			return v.Value, true
		}
	}
	return 0, false
}

// Columns flattens a sample into the profile log's named values: the
// process values, then every stage's values prefixed with "<stage>.", then
// the other registry values.
func Columns(s *Sample) []Value {
	var out []Value
	eachColumn(s, func(prefix, name string, v float64) {
		out = append(out, Value{prefix + name, v})
	})
	return out
}

// logName makes a name safe for a whitespace-separated line.
func logName(s string) string {
	if strings.IndexFunc(s, isBlank) < 0 && s != "" {
		return s
	}
	if s == "" {
		return "_"
	}
	return strings.Map(func(r rune) rune {
		if isBlank(r) {
			return '_'
		}
		return r
	}, s)
}

func isBlank(r rune) bool {
	return r == ' ' || r == '\t' || r == '\n' || r == '\r' || r == '\v' || r == '\f' || r == 0x85 || r == 0xA0
}

// LogWriter appends samples to a profile log.
type LogWriter struct {
	w       *bufio.Writer
	cols    []string
	started bool
	buf     []byte
}

// NewLogWriter returns a writer appending to w. Call Flush to push
// buffered lines out.
func NewLogWriter(w io.Writer) *LogWriter {
	return &LogWriter{w: bufio.NewWriter(w)}
}

// Write appends s as one line, preceded by a "# columns" header when its
// columns differ from the previous line's.
func (l *LogWriter) Write(s *Sample, interval time.Duration) error {
	if !l.started {
		l.started = true
		fmt.Fprintf(l.w, "# sandstorm profile started %s interval %s\n", s.Time.UTC().Format(time.RFC3339), interval)
	}
	if !l.sameColumns(s) {
		l.cols = l.cols[:0]
		b := append(l.buf[:0], "# columns 1:time"...)
		k := 0
		eachColumn(s, func(prefix, name string, _ float64) {
			l.cols = append(l.cols, prefix+name)
			b = append(b, ' ')
			b = strconv.AppendInt(b, int64(3+2*k), 10)
			b = append(b, ':')
			b = append(b, prefix...)
			b = append(b, name...)
			k++
		})
		b = append(b, '\n')
		l.buf = b
		if _, err := l.w.Write(b); err != nil {
			return err
		}
	}
	b := strconv.AppendFloat(l.buf[:0], float64(s.Time.UnixMilli())/1000, 'f', 3, 64)
	i := 0
	eachColumn(s, func(_, _ string, v float64) {
		b = append(b, ' ')
		b = append(b, l.cols[i]...)
		b = append(b, ' ')
		b = appendNumber(b, v)
		i++
	})
	b = append(b, '\n')
	l.buf = b
	_, err := l.w.Write(b)
	return err
}

// sameColumns reports whether s has the columns of the last header.
func (l *LogWriter) sameColumns(s *Sample) bool {
	i, same := 0, true
	eachColumn(s, func(prefix, name string, _ float64) {
		if !same {
			return
		}
		if i >= len(l.cols) {
			same = false
			return
		}
		c := l.cols[i]
		same = len(c) == len(prefix)+len(name) && c[:len(prefix)] == prefix && c[len(prefix):] == name
		i++
	})
	return same && i == len(l.cols)
}

// eachColumn calls f for every column of s in log order; a column's name
// is prefix+name.
func eachColumn(s *Sample, f func(prefix, name string, v float64)) {
	for _, v := range s.Process {
		f("", logName(v.Name), v.Value)
	}
	for _, st := range s.Stages {
		prefix := logName(st.Name) + "."
		for _, v := range st.Values {
			f(prefix, logName(v.Name), v.Value)
		}
	}
	for _, v := range s.Other {
		f("", logName(v.Name), v.Value)
	}
}

// Flush writes buffered lines to the underlying writer.
func (l *LogWriter) Flush() error { return l.w.Flush() }

// appendNumber writes integers without exponent or fraction.
func appendNumber(b []byte, v float64) []byte {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return strconv.AppendInt(b, int64(v), 10)
	}
	return strconv.AppendFloat(b, v, 'g', 6, 64)
}

// ReadLog parses a profile log: comment lines (starting with '#') and blank
// lines are skipped, every other line must be a time followed by
// name/value pairs. Errors name the line and wrap ErrBadLog.
func ReadLog(r io.Reader) ([]Record, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	var out []Record
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" || text[0] == '#' {
			continue
		}
		f := strings.Fields(text)
		if len(f)%2 != 1 {
			return nil, fmt.Errorf("%w: line %d: want a time then name/value pairs, got %d fields", ErrBadLog, line, len(f))
		}
		t, err := strconv.ParseFloat(f[0], 64)
		if err != nil || math.IsNaN(t) || math.IsInf(t, 0) || t < 0 || t > 1e12 {
			return nil, fmt.Errorf("%w: line %d: bad time %q", ErrBadLog, line, f[0])
		}
		rec := Record{Time: time.UnixMilli(int64(math.Round(t * 1000))), Values: make([]Value, 0, len(f)/2)}
		for i := 1; i < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i+1], 64)
			if err != nil {
				return nil, fmt.Errorf("%w: line %d: %s: bad value %q", ErrBadLog, line, f[i], f[i+1])
			}
			rec.Values = append(rec.Values, Value{f[i], v})
		}
		out = append(out, rec)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: line %d: %w", ErrBadLog, line+1, err)
	}
	return out, nil
}

// Series collects the values called name from records, in order, as
// (time, value) points; records without it are skipped.
func Series(recs []Record, name string) []Point {
	var out []Point
	for i := range recs {
		if v, ok := recs[i].Get(name); ok {
			out = append(out, Point{recs[i].Time, v})
		}
	}
	return out
}

// Point is one value of a series.
type Point struct {
	Time  time.Time
	Value float64
}

// StageNames returns the stages of records, in first-seen order: the
// prefixes of names ending in ".queue.length".
func StageNames(recs []Record) []string {
	var out []string
	for _, r := range recs {
		for _, v := range r.Values {
			if name, ok := strings.CutSuffix(v.Name, ".queue.length"); ok && !slices.Contains(out, name) {
				out = append(out, name)
			}
		}
	}
	return out
}
