// Package ring provides Ring, a generic circular buffer: a FIFO queue that
// grows as needed, or, with a limit, a sliding window of the last values
// pushed (the samples a controller computes a percentile or a maximum
// over).
//
// Start with New(limit) for a window, or a zero Ring for a queue. A Ring
// is not safe for concurrent use: its owner serializes access (a lock, or
// one goroutine). It does not sort, search or compute statistics; callers
// copy the values out (AppendTo) or range over them (All).
package ring
