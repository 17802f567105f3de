package broadcast

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/hostd-dev/hostd/runtime/wal"
)

// ResolverChannels adapts a wal.Resolver (the 1:1 wal.Direct, or
// builtin/mapping's resolver) to Channels. One Append call of the engine
// becomes one Resolver.Append per vchannel, run concurrently, so the WAL
// and the catalog committer can group them.
type ResolverChannels struct{ R wal.Resolver }

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
	idx := map[string][]int{}
	var order []string
	for i, e := range entries {
		if _, ok := idx[e.VChannel]; !ok {
			order = append(order, e.VChannel)
		}
		idx[e.VChannel] = append(idx[e.VChannel], i)
	}
	outs := make([]AppendOutcome, len(entries))
	var wg sync.WaitGroup
	for _, vc := range order {
		wg.Add(1)
		go func(vc string, is []int) {
			defer wg.Done()
			recs := make([]wal.Record, len(is))
			for j, i := range is {
				recs[j] = wal.Record{Payload: entries[i].Payload, Props: entries[i].Properties}
			}
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

// Next implements Channels.
func (c ResolverChannels) Next(ctx context.Context, vchannel string) (uint64, error) {
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
		out[i] = ChannelEntry{Offset: m.Offset, Properties: m.Props,
			Checkpoint: Checkpoint{VChannel: vchannel, Offset: m.Offset, PhysicalQueue: m.Queue, TimeTick: m.Tick}}
	}
	return out, nil
}
