package catalog

import (
	"bytes"
	"fmt"
)

// The verdicts on a Batch's conditions, shared by every backend's
// committer: each computes what a key or range holds now (the store
// overlaid with the writes of earlier writers in the same round), these
// decide and word the conflict.

// PendingVersion is what a committer reports for a key written by an
// earlier writer of the same round: no reader can have seen that version,
// so every check on it conflicts.
const PendingVersion = Version(1<<64 - 1)

// InRange reports whether start <= k < end (a nil end is unbounded).
func InRange(k, start, end []byte) bool {
	return bytes.Compare(k, start) >= 0 && (end == nil || bytes.Compare(k, end) < 0)
}

// CheckVersion is c's verdict when c.Key is now at got (0: absent): nil,
// or an error wrapping ErrConflict.
func CheckVersion(c Check, got Version) error {
	if got != c.Version {
		return conflictf("key %q: read at version %d, now %s", c.Key, c.Version, verString(got))
	}
	return nil
}

// CheckRangeSeen is rc's verdict when its range now holds exactly the keys
// of now, at those versions: nil, or an error wrapping ErrConflict naming
// the key removed, changed or inserted.
func CheckRangeSeen(rc RangeCheck, now map[string]Version) error {
	seen := make(map[string]bool, len(rc.Seen))
	for _, kv := range rc.Seen {
		seen[string(kv.Key)] = true
		got, ok := now[string(kv.Key)]
		if !ok {
			return conflictf("range [%q, %q): key %q was removed", rc.Start, rc.End, kv.Key)
		}
		if got != kv.Version {
			return conflictf("range [%q, %q): key %q read at version %d, now %s", rc.Start, rc.End, kv.Key, kv.Version, verString(got))
		}
	}
	for k := range now {
		if !seen[k] {
			return conflictf("range [%q, %q): key %q was inserted", rc.Start, rc.End, k)
		}
	}
	return nil
}

func verString(v Version) string {
	switch v {
	case PendingVersion:
		return "written by a concurrent commit"
	case 0:
		return "absent"
	}
	return fmt.Sprintf("version %d", v)
}

func conflictf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrConflict, fmt.Sprintf(format, args...))
}
