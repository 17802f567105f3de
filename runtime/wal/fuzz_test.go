package wal

import (
	"bytes"
	"testing"
)

func FuzzDecodeEntry(f *testing.F) {
	f.Add(encodeEntry(5, 9, Record{Payload: []byte("hello"), Props: map[string]string{"a": "1", "b": ""}}))
	f.Add(encodeEntry(0, 0, Record{}))
	f.Add(encodeEntry(1, 2, Record{Payload: []byte("b"), Props: map[string]string{"hostd.broadcast.id": "7"}, Kind: KindBroadcast}))
	f.Add(encodeEntry(3, 4, Record{Payload: []byte("m"), Kind: KindMarker}))
	f.Add(encodeEntry(5, 6, Record{Payload: []byte("legacy"), Props: map[string]string{"k": "v"}, Kind: KindLegacy}))
	f.Add([]byte{2, 9, 1, 1, 0})
	f.Add([]byte{1, 0xff})
	f.Add([]byte{1, 1, 1, 200, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		e, cum, err := decodeEntry(7, b)
		if err != nil {
			return
		}
		// Whatever decodes re-encodes to the same bytes.
		// Version 1 decodes as KindLegacy and re-encodes as version 1;
		// version 2 keeps its kind byte.
		if (b[0] == entryV1) != (e.Kind == KindLegacy) {
			t.Fatalf("version %d decoded as kind %s", b[0], e.Kind)
		}
		again := encodeEntry(e.Tick, cum, Record{Payload: e.Payload, Props: e.Props, Kind: e.Kind})
		if !bytes.Equal(again, b) {
			t.Fatalf("re-encode differs:\n%x\n%x", b, again)
		}
	})
}

func FuzzDecodeMeta(f *testing.F) {
	f.Add(meta{next: 3, lastTick: 99, bytes: 1000, state: stateSealed}.encode())
	f.Add([]byte{1})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeMeta(b)
		if err != nil {
			return
		}
		if _, err := decodeMeta(m.encode()); err != nil {
			t.Fatalf("re-decode: %v", err)
		}
	})
}
