package wal

import (
	"context"
	"errors"
	"fmt"

	"github.com/hostd-dev/hostd/runtime/catalog"
)

// ControlChannel is the reserved vchannel every broadcast includes. With
// the 1:1 resolver it is the physical queue of the same name; with the
// mapping it is logic queue 0 of topic "_control".
const ControlChannel = "_control/0"

// ErrNoChannel means a vchannel does not exist. Resolvers wrap it with the
// vchannel name.
var ErrNoChannel = errors.New("wal: no such vchannel")

// Position is where one record landed: the vchannel's (logic) offset and
// the physical queue, offset and time tick behind it. The broadcast engine
// persists it as the vchannel's checkpoint.
type Position struct {
	VChannel    string `json:"vchannel"`
	Offset      uint64 `json:"offset"`          // logic offset: continuous across remaps
	Queue       string `json:"physical_queue"`  // physical queue
	QueueOffset uint64 `json:"physical_offset"` // offset in Queue
	Tick        uint64 `json:"time_tick"`
}

// Message is one record read from a vchannel.
type Message struct {
	Position
	Payload []byte
	Props   map[string]string
	Kind    Kind // who wrote it: data, broadcast, marker (or legacy)
}

// Resolver turns vchannels (logic queues) into physical queues: the
// broadcast engine appends through it, consumers read through it. The
// 1:1 resolver (NewDirect) maps each vchannel to the physical queue of the
// same name; builtin/mapping provides the real one (topic/N → current
// leader segment).
//
// Offsets are the vchannel's logic offsets. Max is exclusive (the next
// offset to be assigned).
type Resolver interface {
	// Check returns nil if vchannel exists, else an error wrapping
	// ErrNoChannel.
	Check(ctx context.Context, vchannel string) error
	// Append appends recs to vchannel atomically, in order, and returns one
	// Position per record.
	Append(ctx context.Context, vchannel string, recs []Record) ([]Position, error)
	// Read returns up to limit messages from logic offset from on.
	// Errors: ErrNoChannel, an error matching ErrOutOfRange (with min/max).
	Read(ctx context.Context, vchannel string, from uint64, limit int) ([]Message, error)
	// Bounds returns the retained logic range [min, max).
	Bounds(ctx context.Context, vchannel string) (min, max uint64, err error)
	// Wait blocks until max > offset or ctx ends.
	Wait(ctx context.Context, vchannel string, offset uint64) error
}

// ChannelRecords is one vchannel's share of a multi-vchannel append.
type ChannelRecords struct {
	VChannel string
	Recs     []Record
}

// MultiAppender is implemented by resolvers that append to several
// vchannels in one atomic catalog commit (all or none), so a broadcast to
// N vchannels costs one durable write. It returns one Position slice per
// element of batches. A failure caused by one vchannel (missing, sealed,
// invalid, too large) is a *PartError whose Index is that element and
// whose Queue is its vchannel; nothing was appended then. The extra
// catalog writes are committed in the same transaction (the broadcast
// engine persists a new task with its first appends this way).
type MultiAppender interface {
	AppendMulti(ctx context.Context, batches []ChannelRecords, extra []catalog.Op) ([][]Position, error)
}

// NextHinter is implemented by resolvers that can tell, from memory, a
// lower bound of the logic offset a vchannel assigns next (exact when
// nothing is being appended to it). The broadcast engine records it as a
// recovery low-water mark, for which any lower bound is correct.
type NextHinter interface {
	NextHint(ctx context.Context, vchannel string) (uint64, error)
}

// Direct is the 1:1 resolver: vchannel name == physical queue name. A
// vchannel exists iff its queue does (create queues with WAL.Create or
// Config.Queues; the control channel is created by NewDirect).
type Direct struct{ w *WAL }

// NewDirect returns the 1:1 resolver over w and makes sure the control
// channel exists.
func NewDirect(ctx context.Context, w *WAL) (*Direct, error) {
	if err := w.Create(ctx, ControlChannel); err != nil && !errors.Is(err, ErrExists) {
		return nil, err
	}
	return &Direct{w: w}, nil
}

func chanErr(vchannel string, err error) error {
	if errors.Is(err, ErrNoQueue) {
		return fmt.Errorf("%w: %q", ErrNoChannel, vchannel)
	}
	return err
}

// Check implements Resolver.
func (d *Direct) Check(ctx context.Context, vchannel string) error {
	if err := ValidateQueueName(vchannel); err != nil {
		return fmt.Errorf("%w: %v", ErrNoChannel, err)
	}
	_, err := d.w.Bounds(ctx, vchannel)
	return chanErr(vchannel, err)
}

// Append implements Resolver.
func (d *Direct) Append(ctx context.Context, vchannel string, recs []Record) ([]Position, error) {
	ents, err := d.w.Append(ctx, vchannel, recs)
	if err != nil {
		return nil, chanErr(vchannel, err)
	}
	out := make([]Position, len(ents))
	for i, e := range ents {
		out[i] = Position{VChannel: vchannel, Offset: e.Offset, Queue: vchannel, QueueOffset: e.Offset, Tick: e.Tick}
	}
	return out, nil
}

// Read implements Resolver.
func (d *Direct) Read(ctx context.Context, vchannel string, from uint64, limit int) ([]Message, error) {
	ents, err := d.w.Read(ctx, vchannel, from, limit)
	if err != nil {
		return nil, chanErr(vchannel, err)
	}
	out := make([]Message, len(ents))
	for i, e := range ents {
		out[i] = Message{
			Position: Position{VChannel: vchannel, Offset: e.Offset, Queue: vchannel, QueueOffset: e.Offset, Tick: e.Tick},
			Payload:  e.Payload, Props: e.Props, Kind: e.Kind,
		}
	}
	return out, nil
}

// Bounds implements Resolver.
func (d *Direct) Bounds(ctx context.Context, vchannel string) (uint64, uint64, error) {
	b, err := d.w.Bounds(ctx, vchannel)
	return b.Min, b.Max, chanErr(vchannel, err)
}

// Wait implements Resolver.
func (d *Direct) Wait(ctx context.Context, vchannel string, offset uint64) error {
	return chanErr(vchannel, d.w.Wait(ctx, vchannel, offset))
}

// AppendMulti implements MultiAppender.
func (d *Direct) AppendMulti(ctx context.Context, batches []ChannelRecords, extra []catalog.Op) ([][]Position, error) {
	parts := make([]Part, len(batches))
	for i, b := range batches {
		parts[i] = Part{Queue: b.VChannel, Recs: b.Recs}
	}
	if len(extra) > 0 && len(parts) > 0 {
		parts[0].Extra = func([]Entry) []catalog.Op { return extra }
	}
	ents, err := d.w.AppendMulti(ctx, parts)
	if err != nil {
		var pe *PartError
		if errors.As(err, &pe) {
			return nil, &PartError{Index: pe.Index, Queue: pe.Queue, Err: chanErr(pe.Queue, pe.Err)}
		}
		return nil, err
	}
	out := make([][]Position, len(ents))
	for i, es := range ents {
		vc := batches[i].VChannel
		out[i] = make([]Position, len(es))
		for j, e := range es {
			out[i][j] = Position{VChannel: vc, Offset: e.Offset, Queue: vc, QueueOffset: e.Offset, Tick: e.Tick}
		}
	}
	return out, nil
}

// NextHint implements NextHinter.
func (d *Direct) NextHint(ctx context.Context, vchannel string) (uint64, error) {
	if err := ValidateQueueName(vchannel); err != nil {
		return 0, fmt.Errorf("%w: %v", ErrNoChannel, err)
	}
	n, err := d.w.NextHint(ctx, vchannel)
	return n, chanErr(vchannel, err)
}
