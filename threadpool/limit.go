package threadpool

// Limit returns the most workers the pool may grow to now: its size stays
// at or below it unless a resize is still under way. It is
//
//   - the initial size when no controller runs (Controller not enabled,
//     SingleThreaded, Max == Min): the pool never resizes, unless Retune
//     moves its bounds past that size;
//   - the SEDA Controller's Limit: Max, or the lower limit its thrashing
//     detection set;
//   - Max under another Sizer (Whirlwind, NewSizer), which detects no
//     thrashing.
//
// With Size it tells whether the pool can still grow (Size < Limit), which
// admission control composed with the pool needs (enqueuepred.NewSaturated,
// thesis §8.2.1). It takes no lock: it is read while a stage's queue is
// locked.
func (p *Pool) Limit() int {
	_, hi := p.bounds()
	switch {
	case !p.cfg.Controller.Enabled:
		return int(p.pinned.Load())
	case p.other == nil:
		return min(p.ctrl.Limit(), hi)
	}
	return hi
}
