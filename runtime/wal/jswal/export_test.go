package jswal

import "github.com/nats-io/nats.go"

// SetDropAck makes publishes whose message drop returns true lose their
// ack (the message is stored, the writer sees a timeout). Tests only; not
// safe while appends run.
func SetDropAck(drop func(m *nats.Msg) bool) { testDropAck = drop }
