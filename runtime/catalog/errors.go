package catalog

import (
	"errors"
	"fmt"
)

// Additional sentinels of this implementation (additive to the contract in
// catalog.go).
var (
	// ErrInvalid means a Batch, key, or argument is malformed (empty key,
	// reserved prefix, zero sequence count, ...). Nothing was applied.
	ErrInvalid = errors.New("catalog: invalid request")
	// ErrLocked means the data directory is in use by another process (or
	// another open DB in this process).
	ErrLocked = errors.New("catalog: data directory in use")
	// ErrFormat means the data directory (or a backup) holds a catalog
	// format this binary does not understand.
	ErrFormat = errors.New("catalog: unsupported format")
	// ErrDecode means a stored record could not be decoded.
	ErrDecode = errors.New("catalog: cannot decode record")
)

// DecodeError names a record that failed to decode. errors.Is(err,
// ErrDecode) holds for it.
type DecodeError struct {
	Key []byte // the record's key
	Err error  // what went wrong
}

func (e *DecodeError) Error() string {
	return fmt.Sprintf("catalog: cannot decode record %q: %v", e.Key, e.Err)
}

// Unwrap returns the underlying decode error.
func (e *DecodeError) Unwrap() error { return e.Err }

// Is reports whether target is ErrDecode.
func (e *DecodeError) Is(target error) bool { return target == ErrDecode }

// LockedError names a data directory that another process holds.
// errors.Is(err, ErrLocked) holds for it.
type LockedError struct {
	Dir string
	Err error // the underlying lock error
}

func (e *LockedError) Error() string {
	return fmt.Sprintf("catalog: data directory %s is in use by another hostd process (or another open catalog); stop it or choose another --data-dir", e.Dir)
}

// Unwrap returns the underlying error.
func (e *LockedError) Unwrap() error { return e.Err }

// Is reports whether target is ErrLocked.
func (e *LockedError) Is(target error) bool { return target == ErrLocked }

// FormatError reports a catalog format version this binary cannot use.
// errors.Is(err, ErrFormat) holds for it.
type FormatError struct {
	Dir       string // data directory or backup file
	Found     uint32 // version found on disk
	Supported uint32 // newest version this binary supports
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("catalog: %s holds catalog format version %d, but this hostd supports at most version %d; upgrade hostd (or restore a backup made by this version)", e.Dir, e.Found, e.Supported)
}

// Is reports whether target is ErrFormat.
func (e *FormatError) Is(target error) bool { return target == ErrFormat }
