package broadcast

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/hostd-dev/hostd/runtime/catalog"
	"github.com/hostd-dev/hostd/runtime/wal"
)

// ResolverChannels adapts a wal.Resolver (the 1:1 wal.Direct, or
// builtin/mapping's resolver) to Channels. One Append call of the engine
// becomes one Resolver.Append per vchannel, run concurrently, so the WAL
// and the catalog committer can group them.
//
// Every record it appends has kind wal.KindBroadcast (never data), so no
// client append can pass for a broadcast message; Markers names message
// types whose records are markers (wal.KindMarker) on every vchannel but
// the control channel, like the mapping's remap.
type ResolverChannels struct {
	R       wal.Resolver
	Markers map[string]bool // message type → written as wal.KindMarker
}

// Check implements Channels.
func (c ResolverChannels) Check(ctx context.Context, vchannel string) error {
	if err := c.R.Check(ctx, vchannel); err != nil {
		if errors.Is(err, wal.ErrNoChannel) {
			return fmt.Errorf("%w: %q", ErrUnknownVChannel, vchannel)
		}
		return err
	}
	return nil
}

// Append implements Channels.
func (c ResolverChannels) Append(ctx context.Context, entries []AppendEntry) ([]AppendOutcome, error) {
	idx, order := groupByVChannel(entries)
	outs := make([]AppendOutcome, len(entries))
	if ma, ok := c.R.(wal.MultiAppender); ok && len(order) > 1 {
		if c.appendMulti(ctx, ma, entries, order, idx, outs, nil, false) {
			return outs, nil
		}
		// One vchannel failed the combined commit (missing, sealed past
		// retries, too large together): append per vchannel, so the
		// others are not held back by it.
	}
	var wg sync.WaitGroup
	for _, vc := range order {
		wg.Add(1)
		go func(vc string, is []int) {
			defer wg.Done()
			recs := c.recordsOf(entries, is)
			pos, err := c.R.Append(ctx, vc, recs)
			if err == nil && len(pos) != len(recs) {
				err = fmt.Errorf("broadcast: resolver returned %d positions for %d records", len(pos), len(recs))
			}
			for j, i := range is {
				if err != nil {
					outs[i].Err = err
					continue
				}
				p := pos[j]
				outs[i].Checkpoint = Checkpoint{VChannel: vc, Offset: p.Offset, PhysicalQueue: p.Queue, TimeTick: p.Tick}
			}
		}(vc, idx[vc])
	}
	wg.Wait()
	return outs, nil
}

// AppendAtomic implements AtomicAppender when the resolver implements
// wal.MultiAppender; otherwise every entry fails with
// errors.ErrUnsupported (the engine then persists on its own first).
func (c ResolverChannels) AppendAtomic(ctx context.Context, entries []AppendEntry, extra []catalog.Op) ([]AppendOutcome, error) {
	ma, ok := c.R.(wal.MultiAppender)
	if !ok {
		return nil, fmt.Errorf("broadcast: resolver %T cannot append atomically: %w", c.R, errors.ErrUnsupported)
	}
	idx, order := groupByVChannel(entries)
	outs := make([]AppendOutcome, len(entries))
	c.appendMulti(ctx, ma, entries, order, idx, outs, extra, true)
	return outs, nil
}

// recordsOf returns the WAL records of entries[is...], in that order,
// of kind broadcast (or marker, see Markers).
func (c ResolverChannels) recordsOf(entries []AppendEntry, is []int) []wal.Record {
	recs := make([]wal.Record, len(is))
	for j, i := range is {
		e := entries[i]
		kind := wal.KindBroadcast
		if e.VChannel != ControlChannel && c.Markers[e.Properties[HeaderMessageType]] {
			kind = wal.KindMarker
		}
		recs[j] = wal.Record{Payload: e.Payload, Props: e.Properties, Kind: kind}
	}
	return recs
}

func groupByVChannel(entries []AppendEntry) (map[string][]int, []string) {
	idx := map[string][]int{}
	var order []string
	for i, e := range entries {
		if _, ok := idx[e.VChannel]; !ok {
			order = append(order, e.VChannel)
		}
		idx[e.VChannel] = append(idx[e.VChannel], i)
	}
	return idx, order
}

// appendMulti appends every vchannel's entries (and extra) in one atomic
// commit, filling outs. Unless atomic, it returns false without touching
// outs when a single vchannel caused the failure, so the caller falls back
// to one append per vchannel; atomic, every entry gets the error.
func (c ResolverChannels) appendMulti(ctx context.Context, ma wal.MultiAppender, entries []AppendEntry,
	order []string, idx map[string][]int, outs []AppendOutcome, extra []catalog.Op, atomic bool) bool {
	batches := make([]wal.ChannelRecords, len(order))
	for k, vc := range order {
		batches[k] = wal.ChannelRecords{VChannel: vc, Recs: c.recordsOf(entries, idx[vc])}
	}
	pos, err := ma.AppendMulti(ctx, batches, extra)
	if err == nil && len(pos) != len(order) {
		err = fmt.Errorf("broadcast: resolver returned positions for %d vchannels, want %d", len(pos), len(order))
	}
	if err != nil {
		var pe *wal.PartError
		// Too large for one commit: the WAL's own limits, or the
		// catalog's (on etcd, one txn holds --max-txn-ops entries: a
		// broadcast to a few hundred vchannels cannot append atomically
		// there, but one vchannel at a time can).
		if !atomic && (errors.As(err, &pe) || errors.Is(err, wal.ErrTooLarge) || errors.Is(err, catalog.ErrTooLarge)) {
			return false
		}
		if errors.Is(err, wal.ErrNoChannel) {
			err = fmt.Errorf("%w: %v", ErrUnknownVChannel, err)
		}
		for i := range outs {
			outs[i].Err = err
		}
		return true
	}
	for k, vc := range order {
		is := idx[vc]
		if len(pos[k]) != len(is) {
			err := fmt.Errorf("broadcast: resolver returned %d positions for %d records", len(pos[k]), len(is))
			for _, i := range is {
				outs[i].Err = err
			}
			continue
		}
		for j, i := range is {
			p := pos[k][j]
			outs[i].Checkpoint = Checkpoint{VChannel: vc, Offset: p.Offset, PhysicalQueue: p.Queue, TimeTick: p.Tick}
		}
	}
	return true
}

// Next implements Channels: a lower bound of the next offset (all the
// engine needs for its recovery low-water marks), from memory when the
// resolver can tell it (wal.NextHinter).
func (c ResolverChannels) Next(ctx context.Context, vchannel string) (uint64, error) {
	if h, ok := c.R.(wal.NextHinter); ok {
		n, err := h.NextHint(ctx, vchannel)
		if errors.Is(err, wal.ErrNoChannel) {
			return 0, fmt.Errorf("%w: %q", ErrUnknownVChannel, vchannel)
		}
		return n, err
	}
	_, max, err := c.R.Bounds(ctx, vchannel)
	if errors.Is(err, wal.ErrNoChannel) {
		return 0, fmt.Errorf("%w: %q", ErrUnknownVChannel, vchannel)
	}
	return max, err
}

// Read implements Channels.
func (c ResolverChannels) Read(ctx context.Context, vchannel string, from uint64, limit int) ([]ChannelEntry, error) {
	msgs, err := c.R.Read(ctx, vchannel, from, limit)
	if err != nil {
		if errors.Is(err, wal.ErrNoChannel) {
			return nil, fmt.Errorf("%w: %q", ErrUnknownVChannel, vchannel)
		}
		if errors.Is(err, wal.ErrOutOfRange) {
			// from is past the end (nothing to find) or before the
			// retained minimum (trimmed entries are not ours to find).
			min, max, berr := c.R.Bounds(ctx, vchannel)
			if berr == nil && from >= max {
				return nil, nil
			}
			if berr == nil && from < min {
				return c.Read(ctx, vchannel, min, limit)
			}
		}
		return nil, err
	}
	out := make([]ChannelEntry, len(msgs))
	for i, m := range msgs {
		out[i] = ChannelEntry{Offset: m.Offset, Properties: m.Props, Kind: m.Kind,
			Checkpoint: Checkpoint{VChannel: vchannel, Offset: m.Offset, PhysicalQueue: m.Queue, TimeTick: m.Tick}}
	}
	return out, nil
}
