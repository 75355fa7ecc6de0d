package profiler_test

import (
	"io"
	"strconv"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/profiler"
	"github.com/sandstorm-go/sandstorm/stage"
)

// BenchmarkSample measures one sample of a 10-stage manager.
func BenchmarkSample(b *testing.B) {
	m := stage.NewManager(stage.Options{})
	names := make([]string, 10)
	for i := range names {
		names[i] = "S" + strconv.Itoa(i)
	}
	pipeline(b, m, stage.StageConfig{}, names...)
	p := newProfiler(b, m, profiler.Config{})
	b.ReportAllocs()
	for b.Loop() {
		p.Sample()
	}
}

// BenchmarkLogWrite measures writing one 10-stage sample to the profile log.
func BenchmarkLogWrite(b *testing.B) {
	m := stage.NewManager(stage.Options{})
	names := make([]string, 10)
	for i := range names {
		names[i] = "S" + strconv.Itoa(i)
	}
	pipeline(b, m, stage.StageConfig{}, names...)
	s := newProfiler(b, m, profiler.Config{}).Sample()
	w := profiler.NewLogWriter(io.Discard)
	b.ReportAllocs()
	for b.Loop() {
		if err := w.Write(&s, time.Second); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(profiler.Columns(&s))), "columns")
}
