package catalog

import (
	"context"
	"errors"
	"io"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

func TestCommitAndBackupSpans(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	db := openTest(t, func(o *Options) { o.TracerProvider = tp })
	ctx, parent := tp.Tracer("test").Start(context.Background(), "parent")
	ver, err := db.Commit(ctx, &Batch{Ops: []Op{put("s/1", "v")}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = db.Commit(ctx, &Batch{Checks: []Check{{Key: []byte("s/1"), Version: ver + 5}}})
	if !errors.Is(err, ErrConflict) {
		t.Fatal(err)
	}
	if _, err := db.Backup(ctx, io.Discard); err != nil {
		t.Fatal(err)
	}
	parent.End()
	var commits, backups int
	for _, s := range rec.Ended() {
		attrs := map[attribute.Key]attribute.Value{}
		for _, kv := range s.Attributes() {
			attrs[kv.Key] = kv.Value
		}
		switch s.Name() {
		case "catalog.Commit":
			commits++
			if s.Parent().SpanID() != parent.SpanContext().SpanID() {
				t.Error("commit span is not a child of the caller's span")
			}
			if commits == 1 && (attrs["catalog.version"].AsInt64() != int64(ver) || attrs["catalog.ops"].AsInt64() != 1) {
				t.Errorf("first commit attrs %v", attrs)
			}
			if commits == 2 && s.Status().Code != codes.Error {
				t.Errorf("conflicting commit span status %v", s.Status())
			}
		case "catalog.Backup":
			backups++
		}
	}
	if commits != 2 || backups != 1 {
		t.Fatalf("spans: %d commits, %d backups", commits, backups)
	}
}
