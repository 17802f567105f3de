package mapping

import (
	"encoding/json"
	"testing"
)

// FuzzDecodeChange: topic.* payloads are outside bytes (API and catalog).
func FuzzDecodeChange(f *testing.F) {
	f.Add("topic.create", []byte(`{"topic":"t","queues":3,"brokers":["a"],"retention":{"max_age":60000000000}}`))
	f.Add("topic.remap", []byte(`{"topic":"t","brokers":["a","b"],"policy":"zone-spread"}`))
	f.Add("topic.grow", []byte(`{"kind":"grow","topic":"t","queues":100001}`))
	f.Add("topic.delete", []byte(`{"topic":"_control"}`))
	f.Add("topic.x", []byte(`{}`))
	f.Fuzz(func(t *testing.T, typ string, payload []byte) {
		c, err := DecodeChange(typ, payload)
		if err != nil {
			return
		}
		// A decoded change is valid and round-trips.
		typ2, p2 := c.Encode()
		c2, err := DecodeChange(typ2, p2)
		if err != nil {
			t.Fatalf("re-decode of %s %s: %v", typ2, p2, err)
		}
		a, _ := json.Marshal(c)
		b, _ := json.Marshal(c2)
		if string(a) != string(b) {
			t.Fatalf("round trip changed %s into %s", a, b)
		}
	})
}

// FuzzDecodeRecords: stored topic and queue records never panic the
// decoders or the invariant checker.
func FuzzDecodeRecords(f *testing.F) {
	f.Add([]byte(`{"name":"t","queues":1,"epoch":1}`), []byte(`{"topic":"t","id":0,"segments":[{"gen":1,"broker":"a","queue_id":1}]}`))
	f.Add([]byte(`{"name":"t","queues":1}`), []byte(`{"topic":"t","id":0,"segments":[{"gen":2,"broker":"a","queue_id":1,"end_offset":0},{"gen":1,"broker":"a","queue_id":1}]}`))
	f.Fuzz(func(t *testing.T, tb, qb []byte) {
		tp, err := decodeTopic([]byte("k"), tb)
		if err != nil {
			return
		}
		q, err := decodeQueue([]byte("k"), qb)
		if err != nil {
			return
		}
		qs := make([]*LogicQueue, tp.Queues)
		if q.ID >= 0 && q.ID < len(qs) {
			qs[q.ID] = q
		}
		_ = checkTopic(tp, qs, map[string]string{})
	})
}
