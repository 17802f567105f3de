package natstest

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// TestJetStreamPublish starts one server with JetStream, creates a stream
// and publishes to it.
func TestJetStreamPublish(t *testing.T) {
	c := Start(t, Options{SyncAlways: true})
	js, err := jetstream.New(c.Conn(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t"}}); err != nil {
		t.Fatal(err)
	}
	ack, err := js.Publish(ctx, "t", []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	if ack.Sequence != 1 {
		t.Fatalf("sequence %d, want 1", ack.Sequence)
	}
}
