package catalog

import (
	"bytes"
	"errors"
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
