package host

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/hostd-dev/hostd/host/config"
	"github.com/hostd-dev/hostd/runtime/wal"
	"github.com/hostd-dev/hostd/runtime/wal/jswal"
)

// fenceParallelism bounds the fence publishes in flight at a term's start.
const fenceParallelism = 32

// openJetStream opens the physical queues on NATS JetStream
// (wal.backend: jetstream) as h.js, closed with the Host. In cluster mode
// the Log writes with the Host's term and fences every existing queue
// before any component reads a tail (fenceAll), so the previous leader's
// late appends fail everywhere and recovery sees every queue's final tail.
// Queues created later are fenced by the Log before their first append.
func openJetStream(ctx context.Context, h *Host) error {
	if h.js != nil || h.Config().WAL.Backend != config.WALJetStream {
		return nil
	}
	c := h.Config().WAL.JetStream
	producer := h.opts.NodeName
	if producer != "" && h.opts.Term > 0 {
		producer = fmt.Sprintf("%s-t%d", producer, h.opts.Term)
	}
	l, err := jswal.Open(ctx, jswal.Options{
		URL: c.URL, CredsFile: c.CredsFile, User: c.User, Password: c.Password, Token: c.Token,
		Replicas: c.Replicas, Storage: jswal.Storage(c.Storage), StreamPrefix: c.StreamPrefix,
		Term: h.opts.Term, ProducerID: producer, OnFenced: h.opts.OnFenced,
		Duplicates: c.DuplicateWindow, RequestTimeout: c.RequestTimeout,
		Clock:          h.Clock(),
		Logger:         h.Logger().With("component", "jetstream"),
		MeterProvider:  h.MeterProvider(),
		TracerProvider: h.TracerProvider(),
	})
	if err != nil {
		return fmt.Errorf("open jetstream wal (%s): %w", c.URL, err)
	}
	if h.opts.Term > 0 {
		if err := fenceAll(ctx, l, h.opts.Term); err != nil {
			_ = l.Close()
			return fmt.Errorf("term %d: fence jetstream queues: %w", h.opts.Term, err)
		}
	}
	h.js = l
	h.AddComponent("jetstream wal", nil, func(context.Context) error { return l.Close() })
	return nil
}

// fenceAll fences every queue of l at term, fenceParallelism at a time. A
// queue deleted or sealed meanwhile needs no fence (nothing can append to
// it); any other failure is returned: a leader that cannot fence must not
// serve.
func fenceAll(ctx context.Context, l *jswal.Log, term uint64) error {
	qs, err := l.Queues(ctx, "")
	if err != nil {
		return err
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		sem  = make(chan struct{}, fenceParallelism)
	)
	for _, q := range qs {
		wg.Add(1)
		sem <- struct{}{}
		go func(q string) {
			defer func() { <-sem; wg.Done() }()
			err := l.Fence(ctx, q, term)
			if err == nil || errors.Is(err, wal.ErrNoQueue) || errors.Is(err, wal.ErrSealed) {
				return
			}
			mu.Lock()
			errs = append(errs, fmt.Errorf("%s: %w", q, err))
			mu.Unlock()
		}(q)
	}
	wg.Wait()
	if len(errs) > 3 {
		errs = append(errs[:3], fmt.Errorf("and %d more queues", len(errs)-3))
	}
	return errors.Join(errs...)
}

// queueLog is the mapping's Log when the physical queues live on
// JetStream (nil otherwise: the mapping uses h.wal, the embedded WAL).
func queueLog(h *Host) wal.Log {
	if h.js == nil {
		return nil
	}
	return h.js
}
