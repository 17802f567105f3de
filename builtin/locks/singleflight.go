package locks

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"
)

// Flight runs one function per key at a time for in-process callers: N
// concurrent Do calls for one key run fn once and all get its result. When
// the flight ends (success, error or panic) the key is cleared, so the next
// call runs fn again: results are shared, never cached.
type Flight[T any] struct {
	mu    sync.Mutex
	calls map[string]*flightCall[T]
}

type flightCall[T any] struct {
	done   chan struct{}
	val    T
	err    error
	shared int
}

// PanicError is returned to every caller of a flight whose function
// panicked; the panic does not propagate.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("locks: single-flight function panicked: %v", e.Value)
}

// Do runs fn for key unless a flight for key is already running, in which
// case it waits for that flight's result. shared reports whether the result
// was (or will be) given to more than one caller. fn runs with a context
// that is not canceled when the first caller's ctx ends (other callers may
// still want the result); a caller whose ctx ends stops waiting and gets
// ctx's error, and the flight goes on.
func (f *Flight[T]) Do(ctx context.Context, key string, fn func(context.Context) (T, error)) (v T, shared bool, err error) {
	f.mu.Lock()
	if f.calls == nil {
		f.calls = map[string]*flightCall[T]{}
	}
	c := f.calls[key]
	if c != nil {
		c.shared++
		f.mu.Unlock()
		select {
		case <-c.done:
			return c.val, true, c.err
		case <-ctx.Done():
			var zero T
			return zero, true, fmt.Errorf("%w: %w", ErrCanceled, ctx.Err())
		}
	}
	c = &flightCall[T]{done: make(chan struct{})}
	f.calls[key] = c
	f.mu.Unlock()

	go f.run(context.WithoutCancel(ctx), key, c, fn)
	select {
	case <-c.done:
		f.mu.Lock()
		shared = c.shared > 0
		f.mu.Unlock()
		return c.val, shared, c.err
	case <-ctx.Done():
		var zero T
		return zero, false, fmt.Errorf("%w: %w", ErrCanceled, ctx.Err())
	}
}

func (f *Flight[T]) run(ctx context.Context, key string, c *flightCall[T], fn func(context.Context) (T, error)) {
	defer func() {
		if r := recover(); r != nil {
			c.err = &PanicError{Value: r, Stack: debug.Stack()}
		}
		f.mu.Lock()
		delete(f.calls, key)
		f.mu.Unlock()
		close(c.done)
	}()
	c.val, c.err = fn(ctx)
}

// InFlight reports how many keys have a running flight.
func (f *Flight[T]) InFlight() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}
