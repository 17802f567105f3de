package wal

// RecordSize is what a record counts toward byte retention and batch
// limits in the embedded WAL (payload, ID and properties plus a fixed
// overhead). Callers that apply byte retention to another Log (the
// mapping on JetStream) count with it, so a byte budget means the same
// on every backend.
func RecordSize(r Record) int { return recordSize(r) }
