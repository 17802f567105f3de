package catalog

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"testing"
)

// FuzzDecodeJSON: any bytes decode to a value or a *DecodeError naming the
// key; never a panic.
func FuzzDecodeJSON(f *testing.F) {
	f.Add([]byte("bc/task/1"), []byte(`{"id":"1","state":"pending","attempts":3}`))
	f.Add([]byte("lk/x"), []byte(`{"id":`))
	f.Add([]byte("k"), []byte(`{"id":"1"} trailing`))
	f.Add([]byte("k"), []byte(`[1,2,3]`))
	f.Add([]byte(""), []byte("\xff\xfe"))
	type rec struct {
		ID       string            `json:"id"`
		State    string            `json:"state"`
		Attempts int               `json:"attempts"`
		Labels   map[string]string `json:"labels"`
		Raw      []byte            `json:"raw"`
	}
	f.Fuzz(func(t *testing.T, key, value []byte) {
		var r rec
		err := DecodeJSON(key, value, &r)
		if err != nil {
			var de *DecodeError
			if !errors.As(err, &de) || !bytes.Equal(de.Key, key) || !errors.Is(err, ErrDecode) {
				t.Fatalf("error %v is not a *DecodeError naming %q", err, key)
			}
		}
		var anyv any
		_ = DecodeJSON(key, value, &anyv)
		_, _ = Decode[map[string]int](key, value)
	})
}

// FuzzDecodeSeq: sequence records decode or fail cleanly, and what decodes
// re-encodes to the same bytes.
func FuzzDecodeSeq(f *testing.F) {
	f.Add(encodeSeq(1))
	f.Add(encodeSeq(1 << 40))
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{2, 0, 0, 0, 0, 0, 0, 0, 5})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, raw []byte) {
		v, err := decodeSeq([]byte("sys/seq/x"), raw)
		if err != nil {
			if !errors.Is(err, ErrDecode) {
				t.Fatalf("not a decode error: %v", err)
			}
			return
		}
		if !bytes.Equal(encodeSeq(v), raw) {
			t.Fatalf("round trip %x -> %d -> %x", raw, v, encodeSeq(v))
		}
	})
}

// FuzzDecodeMeta: the format record decodes or fails with a *DecodeError.
func FuzzDecodeMeta(f *testing.F) {
	f.Add(encodeMeta(Meta{FormatVersion: FormatVersion}))
	f.Add([]byte(`{"format_version":0}`))
	f.Add([]byte(`{"format_version":-1}`))
	f.Add([]byte(`{"format_version":99999999999}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		m, err := decodeMeta([]byte(KeyFormat), raw)
		if err == nil && m.FormatVersion == 0 {
			t.Fatal("accepted format version 0")
		}
		if err != nil && !errors.Is(err, ErrDecode) {
			t.Fatalf("not a decode error: %v", err)
		}
	})
}

// FuzzBackupFrames: the backup reader accepts only an intact file; any
// other bytes end in an ErrBackup error, never a panic or a huge allocation.
func FuzzBackupFrames(f *testing.F) {
	f.Add(validBackupSeed(nil))
	f.Add(validBackupSeed([]byte{5, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5}))
	f.Add([]byte("HOSTDCAT"))
	f.Add(append(validBackupSeed(nil)[:16], 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f))
	f.Fuzz(func(t *testing.T, data []byte) {
		fr, err := newFrameReader(bytes.NewReader(data))
		if err != nil {
			if !errors.Is(err, ErrBackup) {
				t.Fatalf("header error %v is not ErrBackup", err)
			}
			return
		}
		n, err := io.Copy(io.Discard, fr)
		if err != nil && !errors.Is(err, ErrBackup) {
			t.Fatalf("error %v is not ErrBackup", err)
		}
		if err == nil && n > int64(len(data)) {
			t.Fatalf("read %d bytes from %d", n, len(data))
		}
	})
}

// validBackupSeed builds a well-formed backup around the given frames.
func validBackupSeed(frames []byte) []byte {
	var b bytes.Buffer
	b.WriteString(backupMagic)
	b.Write([]byte{backupCodec, 0, 0, 0, byte(FormatVersion), 0, 0, 0})
	b.Write(frames)
	return appendTrailer(b.Bytes())
}

// FuzzReadBackup: ReadBackup (the backend-neutral reader etcdcat.Restore
// uses) returns records only from frames it could decode and ends any
// malformed file with ErrBackup or ErrFormat, never a panic; a file that
// BackupWriter wrote reads back record for record.
func FuzzReadBackup(f *testing.F) {
	var good bytes.Buffer
	bw := NewBackupWriter(&good, FormatVersion)
	bw.Add(KV{Key: []byte("bc/1"), Value: []byte("one"), Version: 3})
	bw.Add(KV{Key: []byte("bc/2"), Value: nil, Version: 4})
	bw.Close()
	f.Add(good.Bytes())
	f.Add(validBackupSeed(nil))
	f.Add(validBackupSeed([]byte{3, 0, 0, 0, 0, 0, 0, 0, 0x0a, 0x01, 0x0a}))
	f.Add([]byte("HOSTDCAT"))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, err := ReadBackup(bytes.NewReader(data), func(kv KV) error {
			if len(kv.Key) == 0 {
				t.Fatal("record with an empty key")
			}
			return nil
		})
		if err != nil && !errors.Is(err, ErrBackup) && !errors.Is(err, ErrFormat) {
			t.Fatalf("error %v is neither ErrBackup nor ErrFormat", err)
		}
	})
}

func TestBackupWriterRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	bw := NewBackupWriter(&buf, FormatVersion)
	var want []string
	for i := 0; i < 3000; i++ { // several frames
		kv := KV{Key: []byte(fmt.Sprintf("k/%05d", i)), Value: bytes.Repeat([]byte{byte(i)}, i%700), Version: Version(i + 1)}
		if err := bw.Add(kv); err != nil {
			t.Fatal(err)
		}
		want = append(want, fmt.Sprintf("%s:%d:%d", kv.Key, len(kv.Value), kv.Version))
	}
	if err := bw.Close(); err != nil {
		t.Fatal(err)
	}
	var got []string
	format, err := ReadBackup(bytes.NewReader(buf.Bytes()), func(kv KV) error {
		got = append(got, fmt.Sprintf("%s:%d:%d", kv.Key, len(kv.Value), kv.Version))
		return nil
	})
	if err != nil || format != FormatVersion || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("read back %d records (format %d, %v), want %d", len(got), format, err, len(want))
	}
	// And Badger restores it.
	dir := t.TempDir() + "/r"
	if err := Restore(dir, bytes.NewReader(buf.Bytes())); err != nil {
		t.Fatal(err)
	}
	db, err := Open(testOptions(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if v, ver, err := get(t, db, "k/00700"); err != nil || len(v) != 0 || ver != 701 {
		t.Fatalf("k/00700 = %d bytes at %d, %v", len(v), ver, err)
	}
}
