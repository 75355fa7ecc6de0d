package clock

import (
	"context"
	"time"
)

// Sleep waits for d or until ctx is done, whichever comes first, and
// reports whether the whole of d passed with ctx still live. d <= 0 does
// not wait: it reports whether ctx is still live. The timer is stopped on
// return, so a cancelled Sleep leaves nothing behind.
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return ctx.Err() == nil
	}
}
