//go:build !failpoints

package failpoint

// Hit marks a named crash point. Without the failpoints build tag it does
// nothing and compiles away.
func Hit(name string) {}

// Enabled reports whether failpoints are compiled in.
const Enabled = false

// Set installs an in-process action for a point (tests only); without the
// failpoints build tag it is ignored.
func Set(name string, fn func()) {}

// Reset removes all in-process actions.
func Reset() {}
