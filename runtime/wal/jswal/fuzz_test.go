package jswal

import (
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/hostd-dev/hostd/runtime/wal"
)

// FuzzDecodeMsg: decoding a stream message (bytes another writer put on
// the stream) never panics, and what encodeBody wrote decodes to itself.
func FuzzDecodeMsg(f *testing.F) {
	f.Add(encodeBody(byte(wal.KindData), 7, map[string]string{"k": "v"}, []byte("payload")), "3")
	f.Add(encodeBody(kindFence, 1, nil, nil), "9")
	f.Add([]byte{1, 2, 0xff, 0xff}, "")
	f.Add([]byte{}, "x")
	f.Fuzz(func(t *testing.T, b []byte, term string) {
		h := nats.Header{}
		h.Set(hdrTerm, term)
		d, err := decodeMsg(5, h, b)
		if err != nil {
			return
		}
		if d.fence {
			return
		}
		again := encodeBody(byte(d.entry.Kind), d.entry.Tick, d.entry.Props, d.entry.Payload)
		d2, err := decodeMsg(5, h, again)
		if err != nil || d2.entry.Tick != d.entry.Tick || string(d2.entry.Payload) != string(d.entry.Payload) || len(d2.entry.Props) != len(d.entry.Props) {
			t.Fatalf("re-encoded message decodes differently: %v", err)
		}
	})
}
