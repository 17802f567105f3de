package etcdcat

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hostd-dev/hostd/runtime/catalog"
)

// ErrCompacted means a snapshot's revision was compacted away by etcd
// while the View still read from it. Nothing is wrong with the data: run
// the View again (a fresh snapshot). *CompactedError carries the
// revisions.
var ErrCompacted = errors.New("catalog: etcd snapshot compacted")

// CompactedError names the compacted snapshot revision.
// errors.Is(err, ErrCompacted) holds for it.
type CompactedError struct {
	Revision int64 // the snapshot's revision
	Err      error // etcd's error
}

func (e *CompactedError) Error() string {
	return fmt.Sprintf("catalog: etcd compacted revision %d while a view read from it (the view took longer than the compaction retention; retry on a fresh view): %v", e.Revision, e.Err)
}

// Unwrap returns etcd's error.
func (e *CompactedError) Unwrap() error { return e.Err }

// Is reports whether target is ErrCompacted.
func (e *CompactedError) Is(target error) bool { return target == ErrCompacted }

// Fence binds a store to a leader's term (see WithFence).
type Fence struct {
	// Key is the leader's election key (its lease-bound key).
	Key string
	// Revision is the term: the election key's CreateRevision.
	Revision int64
	// OnFenced, if set, is called once (from the goroutine that noticed)
	// when a commit or reservation found the term over.
	OnFenced func()
}

// Store is the etcd-backed catalog.Store. Create it with Open; derive
// term-bound stores with WithFence.
type Store struct {
	opts   Options
	cli    *clientv3.Client
	log    *slog.Logger
	met    *metrics
	tracer trace.Tracer

	kpre string // Prefix + "k/": records
	gpre string // Prefix + "g/": delete generations (range checks)

	// noStream is set once etcd answered RangeStream with Unimplemented
	// (servers before 3.7): scans page with Range instead. Shared by the
	// fenced copies of the store.
	noStream *atomic.Bool

	fence   *Fence
	fenced  atomic.Bool
	onFence sync.Once

	c *committer

	seqMu sync.Mutex
	seqs  map[string]*seqState

	closeOnce sync.Once
}

var (
	_ catalog.Store   = (*Store)(nil)
	_ catalog.Probe   = (*Store)(nil)
	_ catalog.Limiter = (*Store)(nil)
)

// Open checks opts, checks the server's limits against them, writes the
// format record on an empty prefix (or refuses a newer format with a
// *catalog.FormatError) and starts the committer.
func Open(ctx context.Context, opts Options) (*Store, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opts.MeterProvider == nil {
		opts.MeterProvider = noop.NewMeterProvider()
	}
	if opts.TracerProvider == nil {
		opts.TracerProvider = tracenoop.NewTracerProvider()
	}
	met, err := newMetrics(opts.MeterProvider)
	if err != nil {
		return nil, err
	}
	s := &Store{
		opts:     opts,
		cli:      opts.Client,
		log:      opts.Logger,
		met:      met,
		tracer:   opts.TracerProvider.Tracer(meterName),
		kpre:     opts.Prefix + "k/",
		gpre:     opts.Prefix + "g/",
		noStream: new(atomic.Bool),
		seqs:     map[string]*seqState{},
	}
	if err := s.checkLimits(ctx); err != nil {
		return nil, err
	}
	s.c = newCommitter(s)
	if err := s.checkFormat(ctx); err != nil {
		s.c.stop()
		return nil, err
	}
	s.log.Debug("etcd catalog opened", "prefix", opts.Prefix)
	return s, nil
}

// WithFence returns a store on the same client and prefix whose every
// commit and sequence reservation also requires
// CreateRevision(f.Key) == f.Revision. When that fails the commit returns
// an error wrapping catalog.ErrFenced, f.OnFenced is called once, and
// every later commit and reservation of the returned store fails at once
// with ErrFenced. The returned store has its own committer and its own
// sequence blocks (a new term never reuses a block reserved by another
// store). Close it when the term ends; that does not close the client or
// s.
func (s *Store) WithFence(f Fence) *Store {
	fs := &Store{
		opts:     s.opts,
		cli:      s.cli,
		log:      s.log.With("fence_key", f.Key, "term", f.Revision),
		met:      s.met,
		tracer:   s.tracer,
		kpre:     s.kpre,
		gpre:     s.gpre,
		noStream: s.noStream,
		fence:    &f,
		seqs:     map[string]*seqState{},
	}
	fs.c = newCommitter(fs)
	return fs
}

// markFenced records that the term is over and calls OnFenced once.
func (s *Store) markFenced() {
	s.fenced.Store(true)
	s.onFence.Do(func() {
		s.log.Warn("etcd catalog fenced: a newer leader term exists; refusing further commits")
		if s.fence.OnFenced != nil {
			s.fence.OnFenced()
		}
	})
}

func (s *Store) fencedErr() error {
	return fmt.Errorf("%w (election key %q is no longer at create revision %d)", catalog.ErrFenced, s.fence.Key, s.fence.Revision)
}

// Prefix returns the etcd key prefix of the store.
func (s *Store) Prefix() string { return s.opts.Prefix }

// Limits implements catalog.Limiter: MaxBatchOps bounds a batch's ops +
// checks + 2 per range check (+ up to 5 per deleted key's generations);
// MaxBatchSize bounds its request bytes.
func (s *Store) Limits() catalog.Limits {
	return catalog.Limits{
		MaxKeySize:   s.opts.MaxKeySize,
		MaxValueSize: s.opts.MaxValueSize,
		MaxBatchSize: int64(s.opts.MaxRequestBytes - requestMargin),
		MaxBatchOps:  int64(s.opts.MaxTxnOps),
	}
}

// Close stops the committer: queued commits fail with catalog.ErrClosed,
// later calls fail with ErrClosed. The client stays open. Safe to call
// twice.
func (s *Store) Close() error {
	s.closeOnce.Do(func() { s.c.stop() })
	return nil
}

func (s *Store) rctx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.opts.RequestTimeout)
}

func (s *Store) ekey(k []byte) string { return s.kpre + string(k) }

// checkLimits sends two txns whose only compare can never hold (so they
// write nothing): one with MaxTxnOps puts, one of about MaxRequestBytes.
// A server with a lower --max-txn-ops or --max-request-bytes refuses one
// of them, and Open says which setting to change.
func (s *Store) checkLimits(ctx context.Context) error {
	probe := s.opts.Prefix + "probe/"
	never := clientv3.Compare(clientv3.CreateRevision(probe), "=", -1)
	ops := make([]clientv3.Op, s.opts.MaxTxnOps)
	for i := range ops {
		ops[i] = clientv3.OpPut(fmt.Sprintf("%s%d", probe, i), "")
	}
	rctx, cancel := s.rctx(ctx)
	defer cancel()
	_, err := s.cli.Txn(rctx).If(never).Then(ops...).Commit()
	if errors.Is(err, rpctypes.ErrTooManyOps) {
		return fmt.Errorf("catalog: etcd refuses a txn of %d ops: its --max-txn-ops is below catalog.etcd.max_txn_ops %d; raise the server's flag or lower the option: %w", s.opts.MaxTxnOps, s.opts.MaxTxnOps, err)
	}
	if err != nil {
		return fmt.Errorf("catalog: etcd at %v: %w", s.cli.Endpoints(), err)
	}
	size := s.opts.MaxRequestBytes - requestMargin
	_, err = s.cli.Txn(rctx).If(never).Then(clientv3.OpPut(probe, strings.Repeat("x", size-len(probe)-16))).Commit()
	if err != nil && (errors.Is(err, rpctypes.ErrRequestTooLarge) || strings.Contains(err.Error(), "larger than max") || strings.Contains(err.Error(), "too large")) {
		return fmt.Errorf("catalog: etcd refuses a request of %d bytes: its --max-request-bytes (or the client's MaxCallSendMsgSize) is below catalog.etcd.max_request_bytes %d; raise it or lower the option: %w", size, s.opts.MaxRequestBytes, err)
	}
	if err != nil {
		return fmt.Errorf("catalog: etcd at %v: %w", s.cli.Endpoints(), err)
	}
	return nil
}

// checkFormat writes the format record under an empty prefix and refuses
// a newer one.
func (s *Store) checkFormat(ctx context.Context) error {
	key := s.ekey([]byte(catalog.KeyFormat))
	rctx, cancel := s.rctx(ctx)
	defer cancel()
	resp, err := s.cli.Txn(rctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(catalog.EncodeMeta(catalog.Meta{FormatVersion: catalog.FormatVersion})))).
		Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		return etcdErr(fmt.Sprintf("write format record %q", key), err)
	}
	if resp.Succeeded {
		return nil
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		return fmt.Errorf("catalog: etcd: format record %q vanished while opening", key)
	}
	m, err := catalog.DecodeMeta([]byte(catalog.KeyFormat), kvs[0].Value)
	if err != nil {
		return err
	}
	if m.FormatVersion > catalog.FormatVersion {
		return &catalog.FormatError{Dir: "etcd prefix " + s.opts.Prefix, Found: m.FormatVersion, Supported: catalog.FormatVersion}
	}
	return nil
}

// View runs fn on a snapshot: every read of fn is served at one etcd
// revision, fixed by the first read. Errors: catalog.ErrClosed, ctx's
// error, ErrCompacted (*CompactedError) when etcd compacted the revision
// meanwhile, or fn's error.
func (s *Store) View(ctx context.Context, fn func(catalog.Reader) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.c.isStopped() {
		return catalog.ErrClosed
	}
	return fn(&reader{s: s, ctx: ctx})
}

type reader struct {
	s   *Store
	ctx context.Context
	mu  sync.Mutex
	rev int64
}

// revOpts returns the read options pinning the snapshot revision (none
// for the first read, which fixes it).
func (r *reader) revOpts() []clientv3.OpOption {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.rev == 0 {
		return nil
	}
	return []clientv3.OpOption{clientv3.WithRev(r.rev)}
}

func (r *reader) setRev(rev int64) {
	r.mu.Lock()
	if r.rev == 0 {
		r.rev = rev
	}
	r.mu.Unlock()
}

func (r *reader) wrap(err error, what string) error {
	if errors.Is(err, rpctypes.ErrCompacted) {
		r.mu.Lock()
		rev := r.rev
		r.mu.Unlock()
		return &CompactedError{Revision: rev, Err: err}
	}
	return etcdErr(what, err)
}

func (r *reader) get(opts []clientv3.OpOption, key string, more ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	ctx, cancel := r.s.rctx(r.ctx)
	defer cancel()
	resp, err := r.s.cli.Get(ctx, key, append(opts, more...)...)
	if err != nil {
		return nil, err
	}
	r.setRev(resp.Header.Revision)
	return resp, nil
}

func (r *reader) Get(key []byte) ([]byte, catalog.Version, error) {
	if len(key) == 0 {
		return nil, 0, fmt.Errorf("%w: empty key", catalog.ErrInvalid)
	}
	resp, err := r.get(r.revOpts(), r.s.ekey(key))
	if err != nil {
		return nil, 0, r.wrap(err, fmt.Sprintf("get %q", key))
	}
	if len(resp.Kvs) == 0 {
		return nil, 0, catalog.ErrNotFound
	}
	kv := resp.Kvs[0]
	return kv.Value, catalog.Version(kv.ModRevision), nil
}

// scanPage is how many records one range request of a Scan returns.
const scanPage = 256

func (r *reader) Scan(start, end []byte, fn func(catalog.KV) error) error {
	if !r.s.noStream.Load() {
		if err, ok := r.scanStream(start, end, fn); ok {
			return err
		}
	}
	return r.scanPaged(start, end, fn)
}

// scanStream reads [start, end) with one RangeStream (etcd 3.7+): the
// server sends the range in chunks and, unlike paged Range requests, does
// not count the rest of the range for every page — paging costs
// O(n²/page) index visits on the server, which made a leader's recovery
// over 100,000 tombstones take 52 s. The stream is pinned to the view's
// revision (fixed first by a one-key read when this is the view's first
// read, so reads inside fn see the same snapshot). A stream that sends
// nothing for RequestTimeout is abandoned. ok is false when the server
// does not implement RangeStream (nothing was passed to fn): the caller
// pages instead.
func (r *reader) scanStream(start, end []byte, fn func(catalog.KV) error) (err error, ok bool) {
	if len(r.revOpts()) == 0 {
		if _, err := r.get(nil, r.s.kpre); err != nil { // fixes the view's revision
			return r.wrap(err, fmt.Sprintf("scan [%q, %q)", start, end)), true
		}
	}
	ctx, cancel := context.WithCancel(r.ctx)
	idle := time.AfterFunc(r.s.opts.RequestTimeout, cancel)
	ch, err := r.s.cli.GetStream(ctx, r.s.ekey(start), append(r.revOpts(), clientv3.WithRange(r.s.endKey(end)))...)
	defer func() {
		idle.Stop()
		cancel()
		for range ch { // let the stream's goroutine finish
		}
	}()
	if err != nil {
		return r.wrap(err, fmt.Sprintf("scan [%q, %q)", start, end)), true
	}
	first := true
	for resp := range ch {
		if serr := resp.Err(); serr != nil {
			if first && status.Code(serr) == codes.Unimplemented {
				r.s.noStream.Store(true)
				r.s.log.Info("etcd does not serve RangeStream (before 3.7): catalog scans page with Range")
				return nil, false
			}
			if ctx.Err() != nil && r.ctx.Err() == nil {
				serr = fmt.Errorf("no chunk for %v: %w", r.s.opts.RequestTimeout, rpctypes.ErrTimeout)
			}
			return r.wrap(serr, fmt.Sprintf("scan [%q, %q)", start, end)), true
		}
		first = false
		idle.Reset(r.s.opts.RequestTimeout)
		for _, kv := range resp.Kvs {
			k := bytes.TrimPrefix(kv.Key, []byte(r.s.kpre))
			if err := fn(catalog.KV{Key: k, Value: kv.Value, Version: catalog.Version(kv.ModRevision)}); err != nil {
				if errors.Is(err, catalog.ErrStop) {
					return nil, true
				}
				return err, true
			}
		}
	}
	if err := r.ctx.Err(); err != nil {
		return err, true
	}
	if ctx.Err() != nil {
		return r.wrap(fmt.Errorf("no chunk for %v: %w", r.s.opts.RequestTimeout, rpctypes.ErrTimeout), fmt.Sprintf("scan [%q, %q)", start, end)), true
	}
	return nil, true
}

// scanPaged reads [start, end) with Range requests of scanPage records at
// the view's revision (etcd before 3.7).
func (r *reader) scanPaged(start, end []byte, fn func(catalog.KV) error) error {
	from := r.s.ekey(start)
	to := r.s.endKey(end)
	for {
		if err := r.ctx.Err(); err != nil {
			return err
		}
		resp, err := r.get(r.revOpts(), from, clientv3.WithRange(to), clientv3.WithLimit(scanPage), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
		if err != nil {
			return r.wrap(err, fmt.Sprintf("scan [%q, %q)", start, end))
		}
		for _, kv := range resp.Kvs {
			k := bytes.TrimPrefix(kv.Key, []byte(r.s.kpre))
			if err := fn(catalog.KV{Key: k, Value: kv.Value, Version: catalog.Version(kv.ModRevision)}); err != nil {
				if errors.Is(err, catalog.ErrStop) {
					return nil
				}
				return err
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// endKey maps a catalog range end (nil = unbounded) to an etcd range end.
func (s *Store) endKey(end []byte) string {
	if end == nil {
		return clientv3.GetPrefixRangeEnd(s.kpre)
	}
	return s.ekey(end)
}

// validateKey checks a key for writing.
func (s *Store) validateKey(k []byte, internal bool) error {
	switch {
	case len(k) == 0:
		return fmt.Errorf("%w: empty key", catalog.ErrInvalid)
	case len(k) > s.opts.MaxKeySize:
		return fmt.Errorf("%w: key %.64q... is %d bytes, limit is %d (max_key_size)", catalog.ErrTooLarge, k, len(k), s.opts.MaxKeySize)
	case !internal && bytes.HasPrefix(k, []byte(catalog.NSSys)):
		return fmt.Errorf("%w: key %q is under %q, which only the catalog itself writes", catalog.ErrInvalid, k, catalog.NSSys)
	}
	return nil
}
