package load

import (
	"slices"
	"time"

	"github.com/sandstorm-go/sandstorm/apps/arashi"
)

// Summary sums up samples.
type Summary struct {
	Requests  int           // samples
	Admitted  int           // served (not 503, not a transport error)
	Rejected  int           // 503
	Errors    int           // transport errors
	P90       time.Duration // 90th percentile response time of the admitted
	P50       time.Duration
	RejectP90 time.Duration // 90th percentile of the time to a 503
}

// RejectRate is Rejected / Requests (0 with no requests).
func (s Summary) RejectRate() float64 {
	if s.Requests == 0 {
		return 0
	}
	return float64(s.Rejected) / float64(s.Requests)
}

// Summarize sums up the samples for which keep returns true (nil: all).
func Summarize(samples []Sample, keep func(Sample) bool) Summary {
	var s Summary
	var ok, rej []time.Duration
	for _, x := range samples {
		if keep != nil && !keep(x) {
			continue
		}
		s.Requests++
		switch {
		case x.Status == 0:
			s.Errors++
		case x.Status == 503:
			s.Rejected++
			rej = append(rej, x.Latency)
		default:
			s.Admitted++
			ok = append(ok, x.Latency)
		}
	}
	s.P90, s.P50 = Percentile(ok, 0.9), Percentile(ok, 0.5)
	s.RejectP90 = Percentile(rej, 0.9)
	return s
}

// Percentile returns the q-quantile (nearest rank) of ds, 0 if empty. It
// sorts ds.
func Percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := int(q*float64(len(ds))+0.5) - 1
	return ds[min(len(ds)-1, max(0, i))]
}

// Window keeps the samples sent in [from, to).
func Window(from, to time.Duration) func(Sample) bool {
	return func(s Sample) bool { return s.At >= from && s.At < to }
}

// OfKind keeps the samples of one request type sent in [from, to).
func OfKind(k arashi.Kind, from, to time.Duration) func(Sample) bool {
	return func(s Sample) bool { return s.Kind == k && s.At >= from && s.At < to }
}

// OfClass keeps the samples of one class sent in [from, to).
func OfClass(c int, from, to time.Duration) func(Sample) bool {
	return func(s Sample) bool { return s.Class == c && s.At >= from && s.At < to }
}
