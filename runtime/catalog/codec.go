package catalog

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// DecodeJSON decodes a JSON record value into v (a pointer). Any failure,
// including trailing data after the JSON value, is a *DecodeError naming
// key; it never panics on any input.
func DecodeJSON(key, value []byte, v any) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &DecodeError{Key: bytes.Clone(key), Err: fmt.Errorf("panic: %v", p)}
		}
	}()
	dec := json.NewDecoder(bytes.NewReader(value))
	if err := dec.Decode(v); err != nil {
		return &DecodeError{Key: bytes.Clone(key), Err: err}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return &DecodeError{Key: bytes.Clone(key), Err: errors.New("trailing data after JSON value")}
	}
	return nil
}

// Decode is the generic form of DecodeJSON.
func Decode[T any](key, value []byte) (T, error) {
	var v T
	err := DecodeJSON(key, value, &v)
	return v, err
}

// Meta is the catalog's format record, stored as JSON under KeyFormat.
type Meta struct {
	FormatVersion uint32 `json:"format_version"`
}

func encodeMeta(m Meta) []byte {
	b, _ := json.Marshal(m) // cannot fail: plain struct
	return b
}

func decodeMeta(key, raw []byte) (Meta, error) {
	var m Meta
	if err := DecodeJSON(key, raw, &m); err != nil {
		return Meta{}, err
	}
	if m.FormatVersion == 0 {
		return Meta{}, &DecodeError{Key: bytes.Clone(key), Err: errors.New("format_version missing or 0")}
	}
	return m, nil
}

// Sequence records: 1 byte codec version (1) + 8 bytes big-endian "next
// value never handed out" (the durable reservation limit).
const seqCodecV1 = 1

func encodeSeq(limit uint64) []byte {
	b := make([]byte, 9)
	b[0] = seqCodecV1
	binary.BigEndian.PutUint64(b[1:], limit)
	return b
}

func decodeSeq(key, raw []byte) (uint64, error) {
	if len(raw) != 9 {
		return 0, &DecodeError{Key: bytes.Clone(key), Err: fmt.Errorf("sequence record is %d bytes, want 9", len(raw))}
	}
	if raw[0] != seqCodecV1 {
		return 0, &DecodeError{Key: bytes.Clone(key), Err: fmt.Errorf("sequence record codec %d, want %d", raw[0], seqCodecV1)}
	}
	v := binary.BigEndian.Uint64(raw[1:])
	if v == 0 {
		return 0, &DecodeError{Key: bytes.Clone(key), Err: errors.New("sequence limit 0 (values start at 1)")}
	}
	return v, nil
}

// EncodeMeta encodes the format record stored under KeyFormat.
func EncodeMeta(m Meta) []byte { return encodeMeta(m) }

// DecodeMeta decodes the format record; errors are *DecodeError naming key.
func DecodeMeta(key, raw []byte) (Meta, error) { return decodeMeta(key, raw) }
