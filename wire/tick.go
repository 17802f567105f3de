package wire

// Tick is a time tick: Unix nanoseconds of an append, hostd's order of
// appends.
type Tick uint64
