package wasm

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/hostd-dev/hostd/internal/wasmtest"
	"github.com/hostd-dev/hostd/runtime/catalog"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// Badger's and glog's background goroutines live for the process.
		goleak.IgnoreTopFunction("github.com/golang/glog.(*fileSink).flushDaemon"),
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
	)
}

func echoWasm(t testing.TB) string   { return wasmtest.Build(t, "testdata/echo") }
func faultsWasm(t testing.TB) string { return wasmtest.Build(t, "testdata/faults") }

func openStore(t testing.TB) catalog.Store {
	t.Helper()
	o := catalog.DefaultOptions(t.TempDir())
	o.SyncWrites = false
	db, err := catalog.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// copyTo copies src into dir/name.
func copyTo(t testing.TB, src, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, name)
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dst
}

// newRuntime starts a Runtime with the shared compilation cache and closes
// it at the end of the test.
func newRuntime(t testing.TB, cfg Config) (*Runtime, error) {
	t.Helper()
	cfg.CacheDir = wasmtest.CacheDir()
	if cfg.Defaults.InitTimeout == 0 {
		// A Go guest starts in milliseconds, but this machine may be
		// overloaded (parallel race-enabled test packages).
		cfg.Defaults.InitTimeout = 2 * time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	r, err := New(context.Background(), cfg)
	if r != nil {
		t.Cleanup(func() { r.Close() })
	}
	return r, err
}

func mustRuntime(t testing.TB, cfg Config) *Runtime {
	t.Helper()
	r, err := newRuntime(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// commit commits an ack result the way the broadcast engine does.
func commit(ctx context.Context, s catalog.Store, res *AckResult) error {
	_, err := s.Commit(ctx, &catalog.Batch{Checks: res.Checks, RangeChecks: res.RangeChecks, Ops: res.Ops})
	return err
}

// recorder is a slog handler keeping records for assertions.
type recorder struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec.Clone())
	return nil
}
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *recorder) WithGroup(string) slog.Handler      { return r }

func (r *recorder) find(msg string) (slog.Record, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rec := range r.recs {
		if rec.Message == msg {
			return rec, true
		}
	}
	return slog.Record{}, false
}

func attrOf(rec slog.Record, key string) string {
	var v string
	rec.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v = a.Value.String()
			return false
		}
		return true
	})
	return v
}

func isConflict(err error) bool { return errors.Is(err, catalog.ErrConflict) }
