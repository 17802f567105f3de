package catalog

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"
	"math"
	"os"
	"path/filepath"

	badger "github.com/dgraph-io/badger/v4"
	"go.opentelemetry.io/otel/codes"
)

// Backup file layout (all integers little-endian):
//
//	header  "HOSTDCAT" | u32 backup codec (1) | u32 catalog FormatVersion
//	frames  u64 size | protobuf KV list   (Badger's stream backup format)
//	trailer u64 0xFFFFFFFFFFFFFFFF | sha256 of every byte before the trailer
//
// The trailer makes a truncated or corrupted file fail Restore instead of
// restoring a part of the catalog.
const (
	backupMagic    = "HOSTDCAT"
	backupCodec    = 1
	backupHeader   = 16
	backupMaxFrame = 256 << 20
	trailerMark    = math.MaxUint64
)

// ErrBackup means a backup file is malformed, truncated or corrupted.
var ErrBackup = errors.New("catalog: bad backup")

// Backup writes a consistent snapshot of the whole catalog to w while the
// catalog stays online, and returns the snapshot's version.
func (db *DB) Backup(ctx context.Context, w io.Writer) (ver Version, err error) {
	ctx, span := db.tracer.Start(ctx, "catalog.Backup")
	defer func() {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}()
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	ts, err := db.beginRead()
	if err != nil {
		return 0, err
	}
	defer db.endRead(ts)
	h := sha256.New()
	bw := bufio.NewWriterSize(io.MultiWriter(w, h), 1<<16)
	hdr := make([]byte, backupHeader)
	copy(hdr, backupMagic)
	binary.LittleEndian.PutUint32(hdr[8:], backupCodec)
	binary.LittleEndian.PutUint32(hdr[12:], FormatVersion)
	bw.Write(hdr)
	st := db.bdb.NewStreamAt(ts)
	st.LogPrefix = "catalog.Backup"
	if _, err := st.Backup(&ctxWriter{ctx: ctx, w: bw}, 0); err != nil {
		return 0, fmt.Errorf("catalog: backup of %s: %w", displayDir(db.dir), err)
	}
	if err := bw.Flush(); err != nil {
		return 0, fmt.Errorf("catalog: backup: write: %w", err)
	}
	tr := make([]byte, 8, 8+sha256.Size)
	binary.LittleEndian.PutUint64(tr, trailerMark)
	tr = h.Sum(tr)
	if _, err := w.Write(tr); err != nil {
		return 0, fmt.Errorf("catalog: backup: write: %w", err)
	}
	return Version(ts), nil
}

type ctxWriter struct {
	ctx context.Context
	w   io.Writer
}

func (c *ctxWriter) Write(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.w.Write(p)
}

// Restore creates a catalog in dir from a backup made by Backup. It is an
// offline operation: dir must not exist or be empty (so it cannot be in use
// by a running hostd). On any error, whatever Restore created in dir is
// removed. Errors wrap ErrBackup (malformed, truncated or corrupted file),
// ErrFormat (a backup from a newer hostd) or a storage error.
func Restore(dir string, r io.Reader) (err error) {
	if dir == "" {
		return fmt.Errorf("%w: restore needs a data directory", ErrInvalid)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	created := false
	ents, err := os.ReadDir(abs)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if err := os.MkdirAll(abs, 0o700); err != nil {
			return fmt.Errorf("catalog: restore: create %s: %w", abs, err)
		}
		created = true
	case err != nil:
		return fmt.Errorf("catalog: restore: %w", err)
	case len(ents) > 0:
		return fmt.Errorf("%w: restore into %s: directory is not empty (restore needs a new or empty data directory; stop hostd and move the old one away)", ErrInvalid, abs)
	}
	defer func() {
		if err == nil {
			return
		}
		if created {
			os.RemoveAll(abs)
			return
		}
		ents, _ := os.ReadDir(abs)
		for _, e := range ents {
			os.RemoveAll(filepath.Join(abs, e.Name()))
		}
	}()
	fr, err := newFrameReader(r)
	if err != nil {
		return err
	}
	if fr.format > FormatVersion {
		return &FormatError{Dir: "backup", Found: fr.format, Supported: FormatVersion}
	}
	bo := badgerOptions(DefaultOptions(abs), abs)
	bdb, err := badger.OpenManaged(bo)
	if err != nil {
		return fmt.Errorf("catalog: restore: open %s: %w", abs, err)
	}
	if err := safeLoad(bdb, fr); err != nil {
		bdb.Close()
		if errors.Is(err, ErrBackup) {
			return err
		}
		return fmt.Errorf("%w: %v", ErrBackup, err)
	}
	if err := bdb.Close(); err != nil {
		return fmt.Errorf("catalog: restore: close %s: %w", abs, err)
	}
	// Open once through the catalog: checks the format record.
	db, err := Open(DefaultOptions(abs))
	if err != nil {
		return fmt.Errorf("catalog: restore: reopen %s: %w", abs, err)
	}
	return db.Close()
}

func safeLoad(bdb *badger.DB, r io.Reader) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: load: %v", ErrBackup, p)
		}
	}()
	return bdb.Load(r, 256)
}

// frameReader passes Badger's backup frames through, checking each size,
// and ends at a verified trailer: a truncated or altered file is an error,
// never a partial restore or a huge allocation.
type frameReader struct {
	r       *bufio.Reader
	h       hash.Hash
	format  uint32
	remain  uint64
	pending []byte
	done    bool
}

func newFrameReader(r io.Reader) (*frameReader, error) {
	fr := &frameReader{r: bufio.NewReaderSize(r, 1<<16), h: sha256.New()}
	hdr := make([]byte, backupHeader)
	if _, err := io.ReadFull(fr.r, hdr); err != nil {
		return nil, fmt.Errorf("%w: header: %v", ErrBackup, err)
	}
	if string(hdr[:8]) != backupMagic {
		return nil, fmt.Errorf("%w: not a hostd catalog backup (magic %q)", ErrBackup, hdr[:8])
	}
	if c := binary.LittleEndian.Uint32(hdr[8:]); c != backupCodec {
		return nil, fmt.Errorf("%w: backup codec %d, this hostd reads %d", ErrBackup, c, backupCodec)
	}
	fr.format = binary.LittleEndian.Uint32(hdr[12:])
	fr.h.Write(hdr)
	return fr, nil
}

func (f *frameReader) Read(p []byte) (int, error) {
	if len(f.pending) > 0 {
		n := copy(p, f.pending)
		f.pending = f.pending[n:]
		return n, nil
	}
	if f.done {
		return 0, io.EOF
	}
	if f.remain == 0 {
		var sz [8]byte
		if _, err := io.ReadFull(f.r, sz[:]); err != nil {
			return 0, fmt.Errorf("%w: truncated (no trailer): %v", ErrBackup, err)
		}
		size := binary.LittleEndian.Uint64(sz[:])
		if size == trailerMark {
			want := f.h.Sum(nil)
			got := make([]byte, sha256.Size)
			if _, err := io.ReadFull(f.r, got); err != nil {
				return 0, fmt.Errorf("%w: truncated trailer: %v", ErrBackup, err)
			}
			if !bytes.Equal(got, want) {
				return 0, fmt.Errorf("%w: checksum mismatch (file corrupted)", ErrBackup)
			}
			if _, err := f.r.ReadByte(); err != io.EOF {
				return 0, fmt.Errorf("%w: data after the trailer", ErrBackup)
			}
			f.done = true
			return 0, io.EOF
		}
		if size > backupMaxFrame {
			return 0, fmt.Errorf("%w: frame of %d bytes exceeds %d", ErrBackup, size, backupMaxFrame)
		}
		f.h.Write(sz[:])
		f.remain = size
		f.pending = sz[:]
		n := copy(p, f.pending)
		f.pending = f.pending[n:]
		return n, nil
	}
	if uint64(len(p)) > f.remain {
		p = p[:f.remain]
	}
	n, err := f.r.Read(p)
	f.h.Write(p[:n])
	f.remain -= uint64(n)
	if err == io.EOF {
		if f.remain > 0 {
			return n, fmt.Errorf("%w: truncated frame", ErrBackup)
		}
		err = nil
	}
	return n, err
}

// appendTrailer appends the checksum trailer to header+frames (tests).
func appendTrailer(b []byte) []byte {
	sum := sha256.Sum256(b)
	b = binary.LittleEndian.AppendUint64(b, trailerMark)
	return append(b, sum[:]...)
}
