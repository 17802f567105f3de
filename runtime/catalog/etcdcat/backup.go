package etcdcat

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"

	"github.com/hostd-dev/hostd/runtime/catalog"
)

// Backup writes every record under the store's prefix, read at one etcd
// revision, to w in the catalog's backup file format (runtime/catalog
// backup.go), and returns that revision. The file restores into either
// backend: etcdcat.Restore, or catalog.Restore for an embedded data
// directory. Range-check generations are not records and are not backed
// up. The store keeps serving meanwhile; a backup slower than etcd's
// compaction retention fails with ErrCompacted.
func (s *Store) Backup(ctx context.Context, w io.Writer) (ver catalog.Version, err error) {
	ctx, span := s.tracer.Start(ctx, "catalog.Backup")
	span.SetAttributes(attribute.String("catalog.backend", "etcd"))
	defer func() {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}()
	bw := catalog.NewBackupWriter(w, catalog.FormatVersion)
	r := &reader{s: s, ctx: ctx}
	// Fix the revision first, so that an empty catalog still names one.
	if _, _, err := r.Get([]byte(catalog.KeyFormat)); err != nil && !errors.Is(err, catalog.ErrNotFound) {
		return 0, err
	}
	err = r.Scan(nil, nil, func(kv catalog.KV) error { return bw.Add(kv) })
	if err != nil {
		return 0, fmt.Errorf("catalog: etcd backup of %s: %w", s.opts.Prefix, err)
	}
	if err := bw.Close(); err != nil {
		return 0, err
	}
	return catalog.Version(r.rev), nil
}

// Restore loads a backup file made by either backend (a Badger backup
// moves an embedded catalog into etcd: hostd migrate) under opts.Prefix,
// which must hold no key at all. Records are written in txns that fit
// opts' limits; their versions become new etcd revisions. The file's
// checksum is verified at its end, so on any error (including a corrupted
// or truncated file, ErrBackup, or a newer format, ErrFormat) everything
// Restore wrote under the prefix is deleted again.
func Restore(ctx context.Context, opts Options, r io.Reader) (err error) {
	if err := opts.Validate(); err != nil {
		return err
	}
	opts = opts.withDefaults()
	cli := opts.Client
	rctx, cancel := context.WithTimeout(ctx, opts.RequestTimeout)
	resp, err := cli.Get(rctx, opts.Prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	cancel()
	if err != nil {
		return fmt.Errorf("catalog: etcd restore: %w", err)
	}
	if resp.Count > 0 {
		return fmt.Errorf("%w: restore into etcd prefix %q: it holds %d keys (restore needs an empty prefix; delete it or choose another catalog.etcd.prefix)", catalog.ErrInvalid, opts.Prefix, resp.Count)
	}
	wrote := false
	defer func() {
		if err == nil || !wrote {
			return
		}
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opts.RequestTimeout)
		defer cancel()
		if _, derr := cli.Delete(cctx, opts.Prefix, clientv3.WithPrefix()); derr != nil {
			err = fmt.Errorf("%w (and removing the partial restore under %q failed: %v)", err, opts.Prefix, derr)
		}
	}()
	kpre := opts.Prefix + "k/"
	budget := opts.MaxRequestBytes - requestMargin
	var ops []clientv3.Op
	size := 0
	flush := func() error {
		if len(ops) == 0 {
			return nil
		}
		wrote = true
		rctx, cancel := context.WithTimeout(ctx, opts.RequestTimeout)
		defer cancel()
		if _, err := cli.Txn(rctx).Then(ops...).Commit(); err != nil {
			return fmt.Errorf("catalog: etcd restore: write %d records: %w", len(ops), err)
		}
		ops, size = ops[:0], 0
		return nil
	}
	var prev []byte
	_, err = catalog.ReadBackup(r, func(kv catalog.KV) error {
		if prev != nil && bytes.Equal(prev, kv.Key) {
			return nil
		}
		prev = append(prev[:0], kv.Key...)
		if len(kv.Key) > opts.MaxKeySize || len(kv.Value) > opts.MaxValueSize {
			return fmt.Errorf("%w: restore: record %.64q (key %d bytes, value %d bytes) exceeds max_key_size %d or max_value_size %d", catalog.ErrTooLarge, kv.Key, len(kv.Key), len(kv.Value), opts.MaxKeySize, opts.MaxValueSize)
		}
		n := len(kpre) + len(kv.Key) + len(kv.Value) + 16
		if len(ops) >= opts.MaxTxnOps-1 || size+n > budget {
			if err := flush(); err != nil {
				return err
			}
		}
		ops = append(ops, clientv3.OpPut(kpre+string(kv.Key), string(kv.Value)))
		size += n
		return nil
	})
	if err != nil {
		return err
	}
	if err := flush(); err != nil {
		return err
	}
	// Open once: writes the format record if the backup had none and
	// refuses a newer one.
	st, err := Open(ctx, opts)
	if err != nil {
		return fmt.Errorf("catalog: etcd restore: open: %w", err)
	}
	return st.Close()
}

var _ catalog.Backuper = (*Store)(nil)

// Migrate copies a whole catalog from src (an embedded *catalog.DB, or
// another etcd catalog) into opts.Prefix, which must be empty: src's
// Backup streams into Restore through a pipe, so nothing is staged on
// disk. It returns the version of src that was copied. This is what
// hostd migrate runs; src keeps serving meanwhile, so stop writers first
// if the copy must be the final state. Errors: Restore's and src's.
func Migrate(ctx context.Context, src catalog.Backuper, opts Options) (catalog.Version, error) {
	pr, pw := io.Pipe()
	type backupResult struct {
		ver catalog.Version
		err error
	}
	done := make(chan backupResult, 1)
	go func() {
		ver, err := src.Backup(ctx, pw)
		pw.CloseWithError(err)
		done <- backupResult{ver, err}
	}()
	rerr := Restore(ctx, opts, pr)
	pr.CloseWithError(errors.New("catalog: migrate: restore stopped reading"))
	b := <-done
	if rerr != nil { // the source's backup then failed for lack of a reader
		return 0, fmt.Errorf("catalog: migrate: %w", rerr)
	}
	if b.err != nil {
		return 0, fmt.Errorf("catalog: migrate: backup of the source: %w", b.err)
	}
	return b.ver, nil
}
