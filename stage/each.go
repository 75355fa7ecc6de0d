package stage

import "github.com/sandstorm-go/sandstorm/sink"

var _ sink.EachEnqueuer = (*stageSink)(nil)

// EnqueueEach is Enqueue for each event of es, under one lock of the
// stage's queue (sink.EachEnqueuer): errs[i] is es[i]'s verdict.
func (k *stageSink) EnqueueEach(es []sink.Event, errs []error) int {
	if err := k.refuse(); err != nil {
		for i := range es {
			errs[i] = err
		}
		return 0
	}
	n := k.st.queue.EnqueueEach(es, errs)
	if n < len(es) {
		for i, err := range errs[:len(es)] {
			if err != nil {
				errs[i] = k.st.removedError(err)
			}
		}
	}
	k.count(n)
	return n
}
