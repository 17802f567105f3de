package jswal

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hostd-dev/hostd/runtime/wal"
)

// ErrFenced is matched (errors.Is) by *FencedError.
var ErrFenced = errors.New("jswal: fenced by a newer term")

// ErrUnknownOutcome means a publish may or may not have been stored (it
// timed out, or the caller's context ended while it was in flight). Resolve
// it with wal.AppendOnce from the low-water offset the caller persisted.
var ErrUnknownOutcome = errors.New("jswal: append outcome unknown")

// FencedError reports an append (or fence) refused because the queue holds
// a record of a higher term than the writer's: a newer leader took the
// queue over. The writer must step down; nothing of the call was appended
// after the fence.
type FencedError struct {
	Queue string
	Term  uint64 // the writer's term
	By    uint64 // the term found in the queue
}

func (e *FencedError) Error() string {
	return fmt.Sprintf("jswal: queue %q is fenced by term %d (writer's term %d)", e.Queue, e.By, e.Term)
}

// Is reports whether target is ErrFenced.
func (e *FencedError) Is(target error) bool { return target == ErrFenced }

// PayloadError reports, at Open, a server whose max_payload cannot carry
// the largest record hostd accepts plus its envelope. Raise the server's
// max_payload or lower MaxRecordBytes.
type PayloadError struct {
	ServerMax int64 // the server's max_payload
	Need      int64 // MaxRecordBytes + Envelope
}

func (e *PayloadError) Error() string {
	return fmt.Sprintf("jswal: the NATS server's max_payload is %d bytes, but records of up to max_record_bytes plus a %d byte envelope need %d: raise max_payload on the servers or lower max_record_bytes",
		e.ServerMax, Envelope, e.Need)
}

// mark adds wal.ErrUnavailable to *err when JetStream failed for a reason
// that passes (no quorum or stream leader, a server restarting, a lost
// connection, this Log's own request timeout), so callers and the API can
// tell "retry later" (503) from a bug (500). The caller's own deadline or
// cancellation is left alone.
func (l *Log) mark(ctx context.Context, err *error) {
	if *err == nil || errors.Is(*err, wal.ErrUnavailable) || ctx.Err() != nil || !transient(*err) {
		return
	}
	*err = &unavailableError{err: *err}
}

// unavailableError is an error that passes; it matches wal.ErrUnavailable
// and unwraps to the cause.
type unavailableError struct{ err error }

func (e *unavailableError) Error() string { return e.err.Error() + " (unavailable: retry)" }
func (e *unavailableError) Unwrap() []error {
	return []error{wal.ErrUnavailable, e.err}
}

func transient(err error) bool {
	if errors.Is(err, ErrUnknownOutcome) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, nats.ErrDisconnected) || errors.Is(err, nats.ErrConnectionReconnecting) ||
		errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, jetstream.ErrServerShutdown) {
		return true
	}
	var ae *jetstream.APIError
	return errors.As(err, &ae) && ae.Code == 503
}
