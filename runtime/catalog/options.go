package catalog

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/hostd-dev/hostd/runtime/sched"
)

// Options configure Open. Start from DefaultOptions and change fields.
type Options struct {
	// Dir is the data directory. Required unless InMemory. Created if absent.
	Dir string
	// InMemory keeps everything in memory (tests). Dir is ignored.
	InMemory bool
	// SyncWrites fsyncs every commit before Commit returns. Default true.
	SyncWrites bool
	// Logger receives catalog and Badger logs. Default: discard.
	Logger *slog.Logger
	// MeterProvider creates the catalog's metrics. Default: no-op.
	MeterProvider metric.MeterProvider
	// TracerProvider creates a span per Commit and Backup. Default: no-op.
	TracerProvider trace.TracerProvider
	// Clock drives the value-log GC loop. Default: sched.Real.
	Clock sched.Clock
	// GCInterval is how often value-log GC runs. Default 5m; 0 disables.
	GCInterval time.Duration
	// GCDiscardRatio is Badger's value-log GC threshold (0 < r < 1).
	// Default 0.5.
	GCDiscardRatio float64
	// MaxKeySize is the largest key accepted, in bytes. Default 4 KiB.
	MaxKeySize int
	// MaxValueSize is the largest value accepted, in bytes. Default 1 MiB
	// (keeps records well under etcd's 1.5 MiB request limit).
	MaxValueSize int
	// SequenceBlock is how many sequence values NextSequence reserves
	// durably at once; values of a reserved block not handed out before a
	// crash are skipped (gaps). Default 1024.
	SequenceBlock uint64
	// MemTableSize is Badger's memtable size in bytes; the largest atomic
	// batch is about 13% of it (values of 64 KiB and more count only as a
	// pointer). Default 32 MiB.
	MemTableSize int64
	// BlockCacheSize is Badger's block cache in bytes. Default 32 MiB.
	BlockCacheSize int64
	// ValueLogFileSize is the size of one Badger value-log file; GC
	// reclaims space one whole file at a time. Default 256 MiB.
	ValueLogFileSize int64
}

// DefaultOptions returns the defaults for a catalog in dir.
func DefaultOptions(dir string) Options {
	return Options{
		Dir:              dir,
		SyncWrites:       true,
		GCInterval:       5 * time.Minute,
		GCDiscardRatio:   0.5,
		MaxKeySize:       4 << 10,
		MaxValueSize:     1 << 20,
		SequenceBlock:    1024,
		MemTableSize:     32 << 20,
		BlockCacheSize:   32 << 20,
		ValueLogFileSize: 256 << 20,
	}
}

// Validate reports every problem of o at once.
func (o Options) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("catalog.%s: %s", field, fmt.Sprintf(format, args...)))
	}
	if !o.InMemory && o.Dir == "" {
		bad("dir", "required unless in_memory is set")
	}
	if o.GCInterval < 0 {
		bad("gc_interval", "must be >= 0 (0 disables), got %s", o.GCInterval)
	}
	if o.GCDiscardRatio <= 0 || o.GCDiscardRatio >= 1 {
		bad("gc_discard_ratio", "must be in (0, 1), got %v", o.GCDiscardRatio)
	}
	if o.MaxKeySize <= 0 || o.MaxKeySize > 65000 {
		bad("max_key_size", "must be in [1, 65000], got %d", o.MaxKeySize)
	}
	if o.MaxValueSize <= 0 || o.MaxValueSize > 1<<30 {
		bad("max_value_size", "must be in [1, 1 GiB], got %d", o.MaxValueSize)
	}
	if o.SequenceBlock == 0 {
		bad("sequence_block", "must be >= 1")
	}
	if o.MemTableSize < 1<<20 {
		bad("memtable_size", "must be >= 1 MiB, got %d", o.MemTableSize)
	}
	if o.BlockCacheSize < 0 {
		bad("block_cache_size", "must be >= 0, got %d", o.BlockCacheSize)
	}
	if o.ValueLogFileSize < 1<<20 || o.ValueLogFileSize >= 2<<30 {
		bad("value_log_file_size", "must be in [1 MiB, 2 GiB), got %d", o.ValueLogFileSize)
	}
	return errors.Join(errs...)
}
