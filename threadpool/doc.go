// Package threadpool holds the thread managers that run stages' handlers on
// goroutines, and the thread-pool controller that sizes them.
//
// You rarely use this package directly: a stage's `threadpool:` block
// (stage.ThreadPoolConfig) sizes its pool and tunes the controller, and
// `global.threadManager` picks the shared pool.
//
// Pool is the default manager: a pool of goroutines per stage. Each worker
// loops: take a batch (at most the stage's batching factor) off the stage's
// queue, hand it to the stage, repeat; it waits on the queue's Ready channel
// when there is nothing to do. A Controller (thesis §5.4.1) adds a worker
// when the queue stays above its threshold, retires workers idle longer than
// the idle time, and with auto max detection pulls the pool back to the size
// that gave the best throughput when adding workers made things worse.
//
// The controller is pluggable (Sizer): ControllerConfig.Type "whirlwind"
// runs the Whirlwind paper's rule instead (Whirlwind: shrink when workers
// idle, grow when events wait in the queue unless handlers wait for their
// locks, measured per interval as Sample describes), and
// ControllerConfig.NewSizer runs the developer's own. Handlers report lock
// waits through Pool.LockMeter (Mutex does it for them).
//
// SharedPool is the alternative: one pool for many stages, choosing among
// stages with work by smooth weighted round robin.
//
// Both stop the same way: when the stage's queue is closed, the workers drain
// what is left and exit.
//
// Pool.Retune changes a running pool's bounds and controller settings in
// place (a configuration reload: stage.Manager.Reload); turning the
// controller on or off or changing its type needs a new pool.
package threadpool
