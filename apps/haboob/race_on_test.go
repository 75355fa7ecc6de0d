//go:build race

package haboob_test

// raceEnabled: the race detector is on. Its sync.Pool drops a random
// share of what it is given, so pooled buffers are allocated again now
// and then and allocation counts over pools are not exact.
const raceEnabled = true
