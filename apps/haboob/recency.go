package haboob

import "container/list"

// recency orders a cache's entries by use, the most recently used first,
// so that the least recently used is evicted. A use moves an entry to the
// front only if it may have left the front quarter of the list: an entry
// is never further from the front than the number of moves made since
// its own, so while fewer than a quarter of the entries were moved after
// it, it is still in the front quarter and far from eviction. Hot entries
// (most hits) then cost no list update: moving one touches it and its
// neighbours, cache lines shared by every event loop. The order differs
// from exact LRU only inside the front quarter. Not safe for concurrent
// use: the cache's lock guards it.
type recency[T any] struct {
	l     list.List
	moves uint64 // front insertions and moves made so far
}

// recencyMark is an entry's place in a recency list.
type recencyMark struct {
	elem  *list.Element
	moved uint64 // recency.moves right after the entry's last move
}

// add puts v, marked by m, at the front.
func (r *recency[T]) add(m *recencyMark, v T) {
	r.moves++
	m.elem, m.moved = r.l.PushFront(v), r.moves
}

// used records a use of the entry marked m: it moves to the front unless
// it is surely still in the front quarter.
func (r *recency[T]) used(m *recencyMark) {
	if r.moves-m.moved < uint64(r.l.Len()/4) {
		return
	}
	r.moves++
	r.l.MoveToFront(m.elem)
	m.moved = r.moves
}

// remove takes the entry marked m out of the list.
func (r *recency[T]) remove(m *recencyMark) { r.l.Remove(m.elem) }

// oldest returns the least recently used entry.
func (r *recency[T]) oldest() (T, bool) {
	if e := r.l.Back(); e != nil {
		return e.Value.(T), true
	}
	var zero T
	return zero, false
}

// len is the number of entries.
func (r *recency[T]) len() int { return r.l.Len() }
