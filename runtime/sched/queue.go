package sched

import (
	"container/heap"
	"time"
)

// Queue is a due-time queue of keys: each key is scheduled at most once
// (rescheduling moves it), and Due pops the keys whose time has come, in
// due-time order (ties in scheduling order). It is a deterministic core: it
// never reads a clock; callers pass now. Not safe for concurrent use.
type Queue[K comparable] struct {
	h   qheap[K]
	idx map[K]*qitem[K]
	seq uint64
}

type qitem[K comparable] struct {
	key K
	due time.Time
	seq uint64
	pos int
}

// NewQueue returns an empty queue.
func NewQueue[K comparable]() *Queue[K] {
	return &Queue[K]{idx: map[K]*qitem[K]{}}
}

// Schedule makes key due at due, replacing an earlier schedule of key.
func (q *Queue[K]) Schedule(key K, due time.Time) {
	q.seq++
	if it, ok := q.idx[key]; ok {
		it.due, it.seq = due, q.seq
		heap.Fix(&q.h, it.pos)
		return
	}
	it := &qitem[K]{key: key, due: due, seq: q.seq}
	q.idx[key] = it
	heap.Push(&q.h, it)
}

// Remove unschedules key and reports whether it was scheduled.
func (q *Queue[K]) Remove(key K) bool {
	it, ok := q.idx[key]
	if !ok {
		return false
	}
	heap.Remove(&q.h, it.pos)
	delete(q.idx, key)
	return true
}

// DueAt returns when key is due.
func (q *Queue[K]) DueAt(key K) (time.Time, bool) {
	it, ok := q.idx[key]
	if !ok {
		return time.Time{}, false
	}
	return it.due, true
}

// Due removes and returns every key due at or before now, earliest first.
func (q *Queue[K]) Due(now time.Time) []K {
	var out []K
	for len(q.h) > 0 && !q.h[0].due.After(now) {
		it := heap.Pop(&q.h).(*qitem[K])
		delete(q.idx, it.key)
		out = append(out, it.key)
	}
	return out
}

// Next returns the earliest due time, or false when the queue is empty.
func (q *Queue[K]) Next() (time.Time, bool) {
	if len(q.h) == 0 {
		return time.Time{}, false
	}
	return q.h[0].due, true
}

// Len returns the number of scheduled keys.
func (q *Queue[K]) Len() int { return len(q.h) }

type qheap[K comparable] []*qitem[K]

func (h qheap[K]) Len() int { return len(h) }
func (h qheap[K]) Less(i, j int) bool {
	if !h[i].due.Equal(h[j].due) {
		return h[i].due.Before(h[j].due)
	}
	return h[i].seq < h[j].seq
}
func (h qheap[K]) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].pos, h[j].pos = i, j
}
func (h *qheap[K]) Push(x any) {
	it := x.(*qitem[K])
	it.pos = len(*h)
	*h = append(*h, it)
}
func (h *qheap[K]) Pop() any {
	old := *h
	it := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return it
}
