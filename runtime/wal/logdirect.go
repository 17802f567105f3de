package wal

import (
	"context"
	"errors"
	"fmt"
)

// The broadcast engine's record properties (builtin/broadcast writes them
// on every record of hostd's kinds). LogDirect derives a record's ID from
// them.
const (
	propBroadcastID    = "hostd.broadcast.id"
	propBroadcastEpoch = "hostd.broadcast.epoch"
)

// BroadcastRecordID returns the idempotency ID of a record the broadcast
// engine appends to vchannel: "<broadcast id>/<vchannel>", plus
// "/<epoch>" when the record carries a control-channel epoch (a new epoch
// is a new record, never a duplicate of the previous one). It returns ""
// for records that are not hostd's (data) or carry no broadcast id.
func BroadcastRecordID(vchannel string, r Record) string {
	if !r.Kind.Hostd() {
		return ""
	}
	id := r.Props[propBroadcastID]
	if id == "" {
		return ""
	}
	if ep := r.Props[propBroadcastEpoch]; ep != "" && ep != "0" {
		return id + "/" + vchannel + "/" + ep
	}
	return id + "/" + vchannel
}

// LogDirect is the 1:1 resolver over any Log (vchannel name == physical
// queue name), for backends without catalog transactions such as
// JetStream: the broadcast engine appends through it one vchannel at a
// time (it is not a MultiAppender), and every broadcast record gets
// BroadcastRecordID as its Record.ID, so a record appended twice after an
// unknown outcome or a failover is found by wal.FindIDs / AppendOnce (and
// dropped by JetStream's duplicate window).
type LogDirect struct{ l Log }

// NewLogDirect returns the 1:1 resolver over l and makes sure the control
// channel exists.
func NewLogDirect(ctx context.Context, l Log) (*LogDirect, error) {
	if err := l.Create(ctx, ControlChannel); err != nil && !errors.Is(err, ErrExists) {
		return nil, err
	}
	return &LogDirect{l: l}, nil
}

var (
	_ Resolver   = (*LogDirect)(nil)
	_ NextHinter = (*LogDirect)(nil)
)

// Check implements Resolver.
func (d *LogDirect) Check(ctx context.Context, vchannel string) error {
	if err := ValidateQueueName(vchannel); err != nil {
		return fmt.Errorf("%w: %v", ErrNoChannel, err)
	}
	_, err := d.l.Bounds(ctx, vchannel)
	return chanErr(vchannel, err)
}

// Append implements Resolver.
func (d *LogDirect) Append(ctx context.Context, vchannel string, recs []Record) ([]Position, error) {
	withIDs := make([]Record, len(recs))
	for i, r := range recs {
		if r.ID == "" {
			r.ID = BroadcastRecordID(vchannel, r)
		}
		withIDs[i] = r
	}
	ents, err := d.l.Append(ctx, vchannel, withIDs)
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
func (d *LogDirect) Read(ctx context.Context, vchannel string, from uint64, limit int) ([]Message, error) {
	ents, err := d.l.Read(ctx, vchannel, from, limit)
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
func (d *LogDirect) Bounds(ctx context.Context, vchannel string) (uint64, uint64, error) {
	b, err := d.l.Bounds(ctx, vchannel)
	return b.Min, b.Max, chanErr(vchannel, err)
}

// Wait implements Resolver.
func (d *LogDirect) Wait(ctx context.Context, vchannel string, offset uint64) error {
	return chanErr(vchannel, d.l.Wait(ctx, vchannel, offset))
}

// NextHint implements NextHinter.
func (d *LogDirect) NextHint(ctx context.Context, vchannel string) (uint64, error) {
	if err := ValidateQueueName(vchannel); err != nil {
		return 0, fmt.Errorf("%w: %v", ErrNoChannel, err)
	}
	n, err := d.l.NextHint(ctx, vchannel)
	return n, chanErr(vchannel, err)
}
