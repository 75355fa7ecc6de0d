package stage

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/sandstorm-go/sandstorm/enqueuepred"
	"github.com/sandstorm-go/sandstorm/internal/yamlstrict"
	"github.com/sandstorm-go/sandstorm/sink"
)

// Scheduler types for SchedulerConfig.Type.
const (
	SchedulerFIFO     = "fifo"     // oldest first (default)
	SchedulerLIFO     = "lifo"     // newest first
	SchedulerPriority = "priority" // higher principal priority first
	SchedulerStride   = "stride"   // proportional share between classes by tickets
	SchedulerShortest = "shortest" // smallest first within each batch
)

var schedulerTypes = []string{SchedulerFIFO, SchedulerLIFO, SchedulerPriority, SchedulerShortest, SchedulerStride}

// SchedulerConfig chooses the order in which a stage's queued events reach
// its handler (Whirlwind §III.E). In YAML it is a type name
// (`scheduler: lifo`) or a block (`scheduler: {type: stride, tickets: {0:
// 1, 1: 3}}`). The zero value is FIFO, the runtime's fast path.
//
// Priorities and classes are those of the events' principals
// (enqueuepred.PriorityOf, enqueuepred.ClassOf), so that a session is
// scheduled the same way in every stage; sizes come from Sized events.
type SchedulerConfig struct {
	// Type is fifo, lifo, priority, stride or shortest ("" → fifo).
	Type string `yaml:"type"`
	// Tickets gives each class its share under stride scheduling; a
	// class not listed holds one ticket.
	Tickets map[int]int `yaml:"tickets"`
}

// Ordering keys for OrderingConfig.Key.
const (
	KeyEvent     = "event"     // the event's Key method (Keyed)
	KeyPrincipal = "principal" // the ID of the event's principal
)

// OrderingConfig makes a stage handle related events sequentially, like
// Whirlwind's processes: events with the same key are handled one at a
// time, in the order they were enqueued, while events of different keys
// run in parallel on the stage's goroutines. A handler then needs no lock
// for per-key state (it still needs one for a map holding all keys). A
// batch holds at most one event per key; events without a key run
// unordered.
type OrderingConfig struct {
	// Key is "" (no ordering), "event" (events implement Keyed) or
	// "principal" (the ID of the event's principal; anonymous principals
	// have no key).
	Key string `yaml:"key"`
	// Linked fails together the events of a principal: when handling an
	// event fails, the other events of the same principal still queued on
	// this stage are taken out and reported to the stage's monitors as a
	// StageFailed whose Err wraps ErrLinked.
	Linked bool `yaml:"linked"`
}

// Keyed is implemented by events that belong to a sequential process such
// as a connection, a session or a file; see OrderingConfig. An empty key
// means none.
type Keyed interface {
	Key() string
}

// Sized is implemented by events that know their size (bytes, cost) for
// the shortest-first scheduler. Other events are sized by their Cost
// (enqueuepred.Costed), else their principal's Cost, else 0.
type Sized interface {
	Size() int
}

func eventKey(e sink.Event) (string, bool) {
	if k, ok := e.(Keyed); ok {
		key := k.Key()
		return key, key != ""
	}
	return "", false
}

func principalKey(e sink.Event) (string, bool) {
	if p, ok := enqueuepred.PrincipalOf(e); ok && p.ID != "" {
		return p.ID, true
	}
	return "", false
}

func sizeOf(e sink.Event) float64 {
	if s, ok := e.(Sized); ok {
		return float64(s.Size())
	}
	if c, ok := e.(enqueuepred.Costed); ok {
		return c.Cost()
	}
	if p, ok := enqueuepred.PrincipalOf(e); ok {
		return p.Cost
	}
	return 0
}

// buildScheduler returns the queue scheduler for a stage, or nil for the
// plain FIFO fast path.
func buildScheduler(c SchedulerConfig, o OrderingConfig) (sink.Scheduler, error) {
	var inner sink.Scheduler
	switch c.Type {
	case "", SchedulerFIFO:
	case SchedulerLIFO:
		inner = sink.NewLIFO()
	case SchedulerPriority:
		inner = sink.NewPriority(enqueuepred.PriorityOf)
	case SchedulerStride:
		s, err := sink.NewStride(c.Tickets, enqueuepred.ClassOf)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
		}
		inner = s
	case SchedulerShortest:
		inner = sink.NewShortest(sizeOf)
	default:
		return nil, fmt.Errorf("%w: unknown scheduler %q", ErrInvalidConfig, c.Type)
	}
	switch o.Key {
	case "":
		return inner, nil
	case KeyEvent:
		return sink.NewKeyed(eventKey, inner), nil
	case KeyPrincipal:
		return sink.NewKeyed(principalKey, inner), nil
	}
	return nil, fmt.Errorf("%w: unknown ordering key %q", ErrInvalidConfig, o.Key)
}

// ---- validation ----

// problem is a validation finding: the key path below a block and a
// message. It becomes a located error in a file or a plain one in Go.
type problem struct {
	keys []string
	msg  string
}

func (p *problem) inGo() error {
	return fmt.Errorf("%w: %s: %s", ErrInvalidConfig, strings.Join(p.keys, "."), p.msg)
}

// at locates p at the deepest node of its key path present in the block.
func (p *problem) at(block *yaml.Node, path string) error {
	n := block
	for i := len(p.keys); i > 0; i-- {
		if x := lookup(block, p.keys[:i]...); x != nil {
			n = x
			break
		}
	}
	for _, k := range p.keys {
		path = yamlstrict.Join(path, k)
	}
	return yamlstrict.Errorf(n, path, "%s", p.msg)
}

func checkScheduler(c SchedulerConfig) *problem {
	if !slices.Contains(schedulerTypes, c.Type) && c.Type != "" {
		return &problem{[]string{"scheduler"}, fmt.Sprintf("unknown scheduler %q (known: %s)", c.Type, strings.Join(schedulerTypes, ", "))}
	}
	if c.Type != SchedulerStride {
		if len(c.Tickets) > 0 {
			return &problem{[]string{"scheduler", "tickets"}, fmt.Sprintf("tickets only apply to the stride scheduler, not %q", c.Type)}
		}
		return nil
	}
	if len(c.Tickets) == 0 {
		return &problem{[]string{"scheduler", "tickets"}, "stride needs tickets per class, e.g. {0: 1, 1: 3}"}
	}
	classes := make([]int, 0, len(c.Tickets))
	for class := range c.Tickets {
		classes = append(classes, class)
	}
	slices.Sort(classes)
	for _, class := range classes {
		if n := c.Tickets[class]; n <= 0 {
			return &problem{[]string{"scheduler", "tickets", strconv.Itoa(class)}, fmt.Sprintf("tickets must be positive, got %d", n)}
		}
	}
	return nil
}

// checkOrdering validates the ordering block and folds `keyed: true` into
// it.
func checkOrdering(sc *StageConfig) *problem {
	if sc.Keyed {
		if sc.Ordering.Key != "" && sc.Ordering.Key != KeyEvent {
			return &problem{[]string{"keyed"}, fmt.Sprintf("keyed: true means ordering by event key, but ordering.key is %q", sc.Ordering.Key)}
		}
		sc.Ordering.Key = KeyEvent
	}
	switch sc.Ordering.Key {
	case "", KeyEvent, KeyPrincipal:
		return nil
	}
	return &problem{[]string{"ordering", "key"}, fmt.Sprintf("unknown ordering key %q (known: event, principal)", sc.Ordering.Key)}
}

// decodeScheduler reads a `scheduler:` value: a type name or a block.
func decodeScheduler(n *yaml.Node, path string) (SchedulerConfig, error) {
	var c SchedulerConfig
	if n == nil || n.Kind == 0 || (n.Kind == yaml.ScalarNode && n.Tag == "!!null") {
		return c, nil
	}
	if n.Kind == yaml.ScalarNode {
		c.Type = n.Value
		return c, nil
	}
	if n.Kind != yaml.MappingNode {
		return c, yamlstrict.Errorf(n, path, "want a scheduler name (%s) or a block such as {type: stride, tickets: {0: 1, 1: 3}}", strings.Join(schedulerTypes, ", "))
	}
	if err := yamlstrict.Decode(n, path, &c); err != nil {
		return c, err
	}
	if lookup(n, "type") == nil {
		return c, yamlstrict.Errorf(n, yamlstrict.Join(path, "type"), "missing scheduler type (known: %s)", strings.Join(schedulerTypes, ", "))
	}
	return c, nil
}

// errNoFactory explains why a supervised stage needs a factory.
var errNoFactory = errors.New("a supervised stage needs StageConfig.Factory to make its handler again")
