package stage

import (
	"github.com/sandstorm-go/sandstorm/internal/sinkrt"
	"github.com/sandstorm-go/sandstorm/sink"
)

// stageQueue is a stage's queue as the runtime holds it: the sink.Queue
// producers see, plus the runtime-only operations (internal/sinkrt:
// finishing events, pausing, releasing, removing and expiring queued
// events) that sink.Queue does not export.
type stageQueue struct {
	*sink.Queue
	rt sinkrt.Queue
}

func newStageQueue(q *sink.Queue) stageQueue { return stageQueue{Queue: q, rt: sinkrt.Of(q)} }

func (q stageQueue) StampAll()         { q.rt.StampAll() }
func (q stageQueue) InService() int    { return q.rt.InService() }
func (q stageQueue) MayComplete() bool { return q.rt.MayComplete() }
func (q stageQueue) CompleterAt(stamp int64) sinkrt.Completer {
	return q.rt.CompleterAt(stamp)
}
func (q stageQueue) Pause()                      { q.rt.Pause() }
func (q stageQueue) Resume()                     { q.rt.Resume() }
func (q stageQueue) Release(events []sink.Event) { q.rt.Release(events) }
func (q stageQueue) Sheds() bool                 { return q.rt.Sheds() }
func (q stageQueue) RemoveIf(f func(sink.Event) bool) []sink.Event {
	return q.rt.RemoveIf(f)
}
func (q stageQueue) Expire(events []sink.Event, stamps []int64, now int64) int {
	return q.rt.Expire(events, stamps, now)
}
