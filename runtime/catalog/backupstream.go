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

	"github.com/dgraph-io/badger/v4/pb"
	"google.golang.org/protobuf/proto"
)

// The backup file format (see backup.go) is shared by every backend: a
// Badger backup restores into etcd (hostd migrate) and an etcd backup
// restores into Badger. BackupWriter and ReadBackup are the
// backend-neutral halves of it.

// backupFrameBytes is roughly how many bytes of records one frame holds.
const backupFrameBytes = 1 << 20

// BackupWriter writes a backup file from records given one at a time, in
// key order. Records keep their Version (Badger restores them at that
// version; etcd cannot and assigns new revisions).
type BackupWriter struct {
	w    io.Writer
	h    hash.Hash
	bw   *bufio.Writer
	list pb.KVList
	size int
	err  error
}

// NewBackupWriter writes the file header for catalog format version format.
func NewBackupWriter(w io.Writer, format uint32) *BackupWriter {
	b := &BackupWriter{w: w, h: sha256.New()}
	b.bw = bufio.NewWriterSize(io.MultiWriter(w, b.h), 1<<16)
	hdr := make([]byte, backupHeader)
	copy(hdr, backupMagic)
	binary.LittleEndian.PutUint32(hdr[8:], backupCodec)
	binary.LittleEndian.PutUint32(hdr[12:], format)
	_, b.err = b.bw.Write(hdr)
	return b
}

// Add appends one record (copied).
func (b *BackupWriter) Add(kv KV) error {
	if b.err != nil {
		return b.err
	}
	b.list.Kv = append(b.list.Kv, &pb.KV{Key: bytes.Clone(kv.Key), Value: bytes.Clone(kv.Value), Version: uint64(kv.Version)})
	b.size += len(kv.Key) + len(kv.Value) + 16
	if b.size >= backupFrameBytes {
		b.flushFrame()
	}
	return b.err
}

func (b *BackupWriter) flushFrame() {
	if b.err != nil || len(b.list.Kv) == 0 {
		return
	}
	raw, err := proto.Marshal(&b.list)
	if err != nil {
		b.err = fmt.Errorf("catalog: backup: encode frame: %w", err)
		return
	}
	var sz [8]byte
	binary.LittleEndian.PutUint64(sz[:], uint64(len(raw)))
	if _, err := b.bw.Write(sz[:]); err != nil {
		b.err = fmt.Errorf("catalog: backup: write: %w", err)
		return
	}
	if _, err := b.bw.Write(raw); err != nil {
		b.err = fmt.Errorf("catalog: backup: write: %w", err)
		return
	}
	b.list.Kv = b.list.Kv[:0]
	b.size = 0
}

// Close writes the last frame and the checksum trailer. It does not close
// the underlying writer.
func (b *BackupWriter) Close() error {
	b.flushFrame()
	if b.err != nil {
		return b.err
	}
	if err := b.bw.Flush(); err != nil {
		return fmt.Errorf("catalog: backup: write: %w", err)
	}
	tr := make([]byte, 8, 8+sha256.Size)
	binary.LittleEndian.PutUint64(tr, trailerMark)
	tr = b.h.Sum(tr)
	if _, err := b.w.Write(tr); err != nil {
		return fmt.Errorf("catalog: backup: write: %w", err)
	}
	b.err = errors.New("catalog: backup writer closed")
	return nil
}

// Badger meta bits of a backup record (badger/v4 structs.go).
const (
	badgerBitDelete         = 1 << 0
	badgerBitDiscardEarlier = 1 << 2
)

// ReadBackup reads a backup file made by any backend and calls fn with the
// newest live version of every record, in key order: deleted records and
// older versions that a Badger backup may carry are skipped. It returns
// the file's catalog format version once the checksum trailer is verified.
//
// Records reach fn BEFORE the trailer is checked: a caller that applies
// them must undo its work when ReadBackup fails. Errors wrap ErrBackup
// (malformed, truncated or corrupted), ErrFormat (a newer format, checked
// before any record is read) or fn's error.
func ReadBackup(r io.Reader, fn func(KV) error) (format uint32, err error) {
	fr, err := newFrameReader(r)
	if err != nil {
		return 0, err
	}
	if fr.format > FormatVersion {
		return fr.format, &FormatError{Dir: "backup", Found: fr.format, Supported: FormatVersion}
	}
	br := bufio.NewReaderSize(fr, 1<<16)
	var last []byte
	var buf []byte
	for {
		var sz [8]byte
		if _, err := io.ReadFull(br, sz[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return fr.format, nil
			}
			if errors.Is(err, ErrBackup) {
				return 0, err
			}
			return 0, fmt.Errorf("%w: %v", ErrBackup, err)
		}
		n := binary.LittleEndian.Uint64(sz[:]) // <= backupMaxFrame (frameReader)
		if uint64(cap(buf)) < n {
			buf = make([]byte, n)
		}
		if _, err := io.ReadFull(br, buf[:n]); err != nil {
			if errors.Is(err, ErrBackup) {
				return 0, err
			}
			return 0, fmt.Errorf("%w: frame: %v", ErrBackup, err)
		}
		var list pb.KVList
		if err := proto.Unmarshal(buf[:n], &list); err != nil {
			return 0, fmt.Errorf("%w: frame: %v", ErrBackup, err)
		}
		for _, kv := range list.Kv {
			if kv == nil || kv.StreamDone {
				continue
			}
			if last != nil && bytes.Equal(kv.Key, last) {
				continue // an older version of the record just given
			}
			last = append(last[:0], kv.Key...)
			var meta byte
			if len(kv.Meta) > 0 {
				meta = kv.Meta[0]
			}
			if meta&badgerBitDelete != 0 || len(kv.Key) == 0 || bytes.HasPrefix(kv.Key, []byte(badgerPrefix)) {
				continue
			}
			_ = badgerBitDiscardEarlier // a discard marker follows its live version, skipped above
			if err := fn(KV{Key: bytes.Clone(kv.Key), Value: bytes.Clone(kv.Value), Version: Version(kv.Version)}); err != nil {
				return 0, err
			}
		}
	}
}

// Backuper is implemented by stores that write backup files (*DB and the
// etcd catalog), so that hostd backup works for either backend.
type Backuper interface {
	Backup(ctx context.Context, w io.Writer) (Version, error)
}

var _ Backuper = (*DB)(nil)
