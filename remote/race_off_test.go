//go:build !race

package remote

// raceEnabled: built with the race detector, under which sync.Pool drops
// items at random (allocation counts mean nothing).
const raceEnabled = false
