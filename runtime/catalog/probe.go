package catalog

// Probe lets the conformance suite (runtime/catalog/catalogtest) pause and
// observe a backend's batching committer, so that tests can queue writers
// that then share one round. Both backends implement it; production code
// has no use for it.
type Probe interface {
	// Stats returns the committer's counters since the store was opened.
	Stats() Stats
	// SetRoundHook installs fn (nil removes it); fn runs on the committer
	// goroutine at the start of every round with the number of writers
	// taken, before anything of the round is read or written.
	SetRoundHook(fn func(writers int))
	// Queued returns how many commits wait for the next round.
	Queued() int
	// Stopping reports whether Close has begun (new commits fail with
	// ErrClosed).
	Stopping() bool
}

var _ Probe = (*DB)(nil)

// SetRoundHook implements Probe.
func (db *DB) SetRoundHook(fn func(writers int)) {
	if fn == nil {
		db.c.roundHook.Store(nil)
		return
	}
	db.c.roundHook.Store(&fn)
}

// Queued implements Probe.
func (db *DB) Queued() int { return db.c.queued() }

// Stopping implements Probe.
func (db *DB) Stopping() bool {
	db.c.mu.Lock()
	defer db.c.mu.Unlock()
	return db.c.stopped
}
