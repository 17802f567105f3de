package catalog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	badger "github.com/dgraph-io/badger/v4"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/hostd-dev/hostd/runtime/sched"
)

// FormatVersion is the catalog format this binary writes and the newest it
// reads. It is stored under KeyFormat.
const FormatVersion uint32 = 1

// KeyFormat holds the catalog's format record (see doc.go).
const KeyFormat = NSSys + "format"

// badgerPrefix is reserved by Badger for its own keys.
const badgerPrefix = "!badger!"

// DB is the Badger-backed Store. Create it with Open or OpenMemory.
type DB struct {
	opts   Options
	dir    string
	bdb    *badger.DB
	log    *slog.Logger
	clock  sched.Clock
	met    *metrics
	tracer trace.Tracer
	lastTs atomic.Uint64 // newest committed Badger timestamp (= catalog Version)

	// readers guards the set of open snapshots (their read timestamps) and
	// the closed flag; see doc.go "Locking".
	readersMu sync.Mutex
	readers   map[uint64]int
	nreaders  int
	readersCv *sync.Cond
	closed    bool

	c *committer

	seqMu sync.Mutex
	seqs  map[string]*seqState

	gcRuns   atomic.Uint64 // GC passes run by the loop (tests)
	stopGC   chan struct{}
	gcDone   chan struct{}
	closeMu  sync.Mutex
	closeEr  error
	didClose bool
}

var _ Store = (*DB)(nil)

// OpenMemory opens an in-memory catalog with default options (for tests).
func OpenMemory() (*DB, error) {
	o := DefaultOptions("")
	o.InMemory = true
	return Open(o)
}

// Open opens (creating if needed) the catalog described by opts.
//
// Errors: an error wrapping ErrLocked (a *LockedError naming the directory)
// when another process holds the directory; ErrFormat (a *FormatError) when
// the directory holds a newer catalog format; a validation error listing
// every bad option.
func Open(opts Options) (*DB, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opts.MeterProvider == nil {
		opts.MeterProvider = noop.NewMeterProvider()
	}
	if opts.TracerProvider == nil {
		opts.TracerProvider = tracenoop.NewTracerProvider()
	}
	if opts.Clock == nil {
		opts.Clock = sched.Real
	}
	dir := opts.Dir
	if opts.InMemory {
		dir = ""
	} else {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return nil, fmt.Errorf("catalog: data directory %s: %w", dir, err)
		}
		dir = abs
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("catalog: create data directory %s: %w", dir, err)
		}
		if err := removeEmptyLogFiles(dir, opts.Logger); err != nil {
			return nil, err
		}
	}
	bo := badgerOptions(opts, dir)
	bdb, err := badger.OpenManaged(bo)
	if err != nil {
		if strings.Contains(err.Error(), "Cannot acquire directory lock") {
			return nil, &LockedError{Dir: dir, Err: err}
		}
		return nil, fmt.Errorf("catalog: open %s: %w", displayDir(dir), err)
	}
	db := &DB{
		opts:    opts,
		dir:     dir,
		bdb:     bdb,
		log:     opts.Logger,
		clock:   opts.Clock,
		readers: map[uint64]int{},
		seqs:    map[string]*seqState{},
		stopGC:  make(chan struct{}),
		gcDone:  make(chan struct{}),
	}
	db.readersCv = sync.NewCond(&db.readersMu)
	db.tracer = opts.TracerProvider.Tracer(meterName)
	db.lastTs.Store(bdb.MaxVersion())
	bdb.SetDiscardTs(db.lastTs.Load()) // no snapshot is open yet
	db.met, err = newMetrics(opts.MeterProvider)
	if err != nil {
		_ = bdb.Close()
		return nil, err
	}
	db.c = newCommitter(db)
	if err := db.checkFormat(); err != nil {
		db.c.stop()
		_ = bdb.Close()
		return nil, err
	}
	if opts.GCInterval > 0 && !opts.InMemory {
		go db.gcLoop()
	} else {
		close(db.gcDone)
	}
	db.log.Debug("catalog opened", "dir", displayDir(dir), "version", db.lastTs.Load())
	return db, nil
}

// badgerOptions maps Options to Badger's (dir must be absolute or "").
func badgerOptions(opts Options, dir string) badger.Options {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return badger.DefaultOptions(dir).
		WithInMemory(opts.InMemory).
		WithSyncWrites(opts.SyncWrites).
		WithLogger(badgerLogger{opts.Logger}).
		WithMemTableSize(opts.MemTableSize).
		WithBlockCacheSize(opts.BlockCacheSize).
		WithNumVersionsToKeep(1).
		WithValueThreshold(valueThreshold).
		WithValueLogFileSize(opts.ValueLogFileSize).
		WithDetectConflicts(false). // the committer is the only writer
		WithMetricsEnabled(false)
}

func displayDir(dir string) string {
	if dir == "" {
		return "(in-memory catalog)"
	}
	return dir
}

// Dir returns the absolute data directory ("" when in memory).
func (db *DB) Dir() string { return db.dir }

// checkFormat writes the format record on a fresh catalog and refuses a
// newer one.
func (db *DB) checkFormat() error {
	var raw []byte
	err := db.View(context.Background(), func(r Reader) error {
		v, _, err := r.Get([]byte(KeyFormat))
		raw = v
		return err
	})
	switch {
	case errors.Is(err, ErrNotFound):
		_, err := db.c.commit(context.Background(), &Batch{Ops: []Op{{Key: []byte(KeyFormat), Value: encodeMeta(Meta{FormatVersion: FormatVersion})}}}, true)
		return err
	case err != nil:
		return err
	}
	m, err := decodeMeta([]byte(KeyFormat), raw)
	if err != nil {
		return err
	}
	if m.FormatVersion > FormatVersion {
		return &FormatError{Dir: displayDir(db.dir), Found: m.FormatVersion, Supported: FormatVersion}
	}
	return nil
}

// beginRead registers a snapshot at the newest committed version.
func (db *DB) beginRead() (uint64, error) {
	db.readersMu.Lock()
	defer db.readersMu.Unlock()
	if db.closed {
		return 0, ErrClosed
	}
	ts := db.lastTs.Load()
	db.readers[ts]++
	db.nreaders++
	return ts, nil
}

func (db *DB) endRead(ts uint64) {
	db.readersMu.Lock()
	if db.readers[ts]--; db.readers[ts] == 0 {
		delete(db.readers, ts)
	}
	db.nreaders--
	if db.nreaders == 0 {
		db.readersCv.Broadcast()
	}
	db.readersMu.Unlock()
}

// discardTs is the newest timestamp at or below which old versions may be
// dropped: no open snapshot reads below it.
func (db *DB) discardTs() uint64 {
	db.readersMu.Lock()
	defer db.readersMu.Unlock()
	min := db.lastTs.Load()
	for ts := range db.readers {
		if ts < min {
			min = ts
		}
	}
	return min
}

// View runs fn on a consistent snapshot of the newest committed state.
// Errors: ErrClosed, ctx's error, or fn's error.
func (db *DB) View(ctx context.Context, fn func(Reader) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	ts, err := db.beginRead()
	if err != nil {
		return err
	}
	defer db.endRead(ts)
	txn := db.bdb.NewTransactionAt(ts, false)
	defer txn.Discard()
	return fn(&reader{txn: txn, ctx: ctx})
}

// Version returns the newest committed version.
func (db *DB) Version() Version { return Version(db.lastTs.Load()) }

type reader struct {
	txn *badger.Txn
	ctx context.Context
}

func (r *reader) Get(key []byte) ([]byte, Version, error) {
	if len(key) == 0 {
		return nil, 0, fmt.Errorf("%w: empty key", ErrInvalid)
	}
	item, err := r.txn.Get(key)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, 0, ErrNotFound
	}
	if err != nil {
		return nil, 0, fmt.Errorf("catalog: get %q: %w", key, err)
	}
	v, err := item.ValueCopy(nil)
	if err != nil {
		return nil, 0, fmt.Errorf("catalog: read value of %q: %w", key, err)
	}
	return v, Version(item.Version()), nil
}

func (r *reader) Scan(start, end []byte, fn func(KV) error) error {
	return scanTxn(r.ctx, r.txn, start, end, true, func(k []byte, ver uint64, item *badger.Item) error {
		v, err := item.ValueCopy(nil)
		if err != nil {
			return fmt.Errorf("catalog: read value of %q: %w", k, err)
		}
		return fn(KV{Key: k, Value: v, Version: Version(ver)})
	})
}

// scanTxn iterates start <= key < end, skipping Badger's internal keys.
// fn gets a copied key. ErrStop from fn ends the scan without error.
func scanTxn(ctx context.Context, txn *badger.Txn, start, end []byte, values bool, fn func(k []byte, ver uint64, item *badger.Item) error) error {
	it := txn.NewIterator(badger.IteratorOptions{PrefetchValues: values, PrefetchSize: 64})
	defer it.Close()
	n := 0
	for it.Seek(start); it.Valid(); it.Next() {
		item := it.Item()
		k := item.Key()
		if end != nil && bytes.Compare(k, end) >= 0 {
			break
		}
		if bytes.HasPrefix(k, []byte(badgerPrefix)) {
			continue
		}
		if n++; n%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		if err := fn(item.KeyCopy(nil), item.Version(), item); err != nil {
			if errors.Is(err, ErrStop) {
				return nil
			}
			return err
		}
	}
	return nil
}

// Close stops the committer (queued commits fail with ErrClosed), waits for
// open snapshots, stops value-log GC and closes Badger. Safe to call twice.
func (db *DB) Close() error {
	db.closeMu.Lock()
	defer db.closeMu.Unlock()
	if db.didClose {
		return db.closeEr
	}
	db.didClose = true
	db.c.stop()
	close(db.stopGC)
	<-db.gcDone
	db.readersMu.Lock()
	db.closed = true
	for db.nreaders > 0 {
		db.readersCv.Wait()
	}
	db.readersMu.Unlock()
	if err := db.bdb.Close(); err != nil {
		db.closeEr = fmt.Errorf("catalog: close %s: %w", displayDir(db.dir), err)
	}
	return db.closeEr
}

func (db *DB) gcLoop() {
	defer close(db.gcDone)
	for {
		select {
		case <-db.stopGC:
			return
		case <-db.clock.After(db.opts.GCInterval):
		}
		n, err := db.RunGC()
		db.gcRuns.Add(1)
		if err != nil {
			db.log.Warn("catalog value-log GC failed", "dir", db.dir, "err", err)
		} else if n > 0 {
			db.log.Info("catalog value-log GC", "dir", db.dir, "rewritten_files", n)
		}
	}
}

// RunGC lets Badger drop versions no snapshot can see and rewrites value-log
// files until none is worth rewriting. It returns how many files were
// rewritten. The GC loop calls it every Options.GCInterval.
func (db *DB) RunGC() (int, error) {
	if db.opts.InMemory {
		return 0, nil
	}
	db.bdb.SetDiscardTs(db.discardTs())
	n := 0
	for n < 64 {
		select {
		case <-db.stopGC:
			return n, nil
		default:
		}
		err := db.bdb.RunValueLogGC(db.opts.GCDiscardRatio)
		if errors.Is(err, badger.ErrNoRewrite) || errors.Is(err, badger.ErrRejected) {
			break
		}
		if err != nil {
			return n, err
		}
		n++
		db.met.gcRewrites.Add(context.Background(), 1)
	}
	return n, nil
}

// validateKey checks a key for writing.
func (db *DB) validateKey(k []byte, internal bool) error {
	switch {
	case len(k) == 0:
		return fmt.Errorf("%w: empty key", ErrInvalid)
	case len(k) > db.opts.MaxKeySize:
		return fmt.Errorf("%w: key %.64q... is %d bytes, limit is %d (max_key_size)", ErrTooLarge, k, len(k), db.opts.MaxKeySize)
	case bytes.HasPrefix(k, []byte(badgerPrefix)):
		return fmt.Errorf("%w: key %q uses the reserved prefix %q", ErrInvalid, k, badgerPrefix)
	case !internal && bytes.HasPrefix(k, []byte(NSSys)):
		return fmt.Errorf("%w: key %q is under %q, which only the catalog itself writes", ErrInvalid, k, NSSys)
	}
	return nil
}

type badgerLogger struct{ l *slog.Logger }

func (b badgerLogger) Errorf(f string, a ...any) {
	b.l.Error(strings.TrimSpace(fmt.Sprintf(f, a...)), "component", "badger")
}
func (b badgerLogger) Warningf(f string, a ...any) {
	b.l.Warn(strings.TrimSpace(fmt.Sprintf(f, a...)), "component", "badger")
}

// Infof and Debugf format only when debug logging is on: Badger logs on
// every commit path, and formatting a message nobody reads cost ~3% of CPU
// per durable write.
func (b badgerLogger) Infof(f string, a ...any)  { b.debug(f, a) }
func (b badgerLogger) Debugf(f string, a ...any) { b.debug(f, a) }
func (b badgerLogger) debug(f string, a []any) {
	if !b.l.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	b.l.Debug(strings.TrimSpace(fmt.Sprintf(f, a...)), "component", "badger")
}
