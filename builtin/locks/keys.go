package locks

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/hostd-dev/hostd/sdk/abi"
)

// MaxKeyLen is the longest domain or key, in bytes, that Canonicalize
// accepts. Keys end up in catalog record keys and API responses, so they
// are kept well below any storage limit.
const MaxKeyLen = 512

var (
	// ErrInvalidKey is wrapped by every *InvalidKeyError: an empty or
	// overlong domain or key, an unknown mode, or no keys at all.
	ErrInvalidKey = errors.New("locks: invalid key")
	// ErrLocked is wrapped by every *ConflictError: the keys are held (or
	// queued for) in a conflicting mode by someone else.
	ErrLocked = errors.New("locks: locked")
	// ErrClosed is returned by a locker or service after Close, and to the
	// waiters that were queued when Close ran.
	ErrClosed = errors.New("locks: closed")
)

// InvalidKeyError reports a resource key that cannot be locked.
type InvalidKeyError struct {
	Index  int             // position in the caller's list, -1 if not about one key
	Key    abi.ResourceKey // the offending key (zero if Index is -1)
	Reason string          // what is wrong, e.g. "empty domain"
}

func (e *InvalidKeyError) Error() string {
	if e.Index < 0 {
		return "locks: invalid key: " + e.Reason
	}
	return fmt.Sprintf("locks: invalid key #%d %s: %s", e.Index, formatKey(e.Key), e.Reason)
}

// Unwrap makes errors.Is(err, ErrInvalidKey) true.
func (e *InvalidKeyError) Unwrap() error { return ErrInvalidKey }

// ConflictError names the first key of a request that cannot be granted
// now, the owners holding it and the owners queued on it ahead of the
// request. It never contains tokens.
type ConflictError struct {
	Key     abi.ResourceKey // the conflicting key, in the mode that was asked for
	Holders []string        // owners holding Key in a conflicting (or any) mode
	Waiters []string        // owners queued earlier on Key in a conflicting mode
}

func (e *ConflictError) Error() string {
	var b strings.Builder
	b.WriteString("locks: locked: ")
	b.WriteString(formatKey(e.Key))
	if len(e.Holders) > 0 {
		b.WriteString(" held by ")
		b.WriteString(strings.Join(e.Holders, ", "))
	}
	if len(e.Waiters) > 0 {
		if len(e.Holders) > 0 {
			b.WriteString(";")
		}
		b.WriteString(" queued for by ")
		b.WriteString(strings.Join(e.Waiters, ", "))
	}
	return b.String()
}

// Unwrap makes errors.Is(err, ErrLocked) true.
func (e *ConflictError) Unwrap() error { return ErrLocked }

func formatKey(k abi.ResourceKey) string {
	return fmt.Sprintf("%q:%q (%s)", k.Domain, k.Key, k.Mode)
}

// validateKey checks one key; it does not look at other keys.
func validateKey(i int, k abi.ResourceKey) error {
	switch {
	case k.Domain == "":
		return &InvalidKeyError{Index: i, Key: k, Reason: "empty domain"}
	case k.Key == "":
		return &InvalidKeyError{Index: i, Key: k, Reason: "empty key"}
	case len(k.Domain) > MaxKeyLen:
		return &InvalidKeyError{Index: i, Key: k, Reason: fmt.Sprintf("domain longer than %d bytes", MaxKeyLen)}
	case len(k.Key) > MaxKeyLen:
		return &InvalidKeyError{Index: i, Key: k, Reason: fmt.Sprintf("key longer than %d bytes", MaxKeyLen)}
	case k.Mode != abi.Shared && k.Mode != abi.Exclusive:
		return &InvalidKeyError{Index: i, Key: k, Reason: fmt.Sprintf("unknown mode %d", k.Mode)}
	}
	return nil
}

// Canonicalize returns keys validated, de-duplicated (exclusive wins over
// shared on the same domain and key) and sorted by domain, then key. The
// input slice is not modified. An empty input yields an empty result; an
// invalid key yields an *InvalidKeyError (errors.Is ErrInvalidKey).
//
// It does not add any implicit key (the broadcast engine's "shared cluster
// key" rule belongs to the engine).
func Canonicalize(keys []abi.ResourceKey) ([]abi.ResourceKey, error) {
	out := make([]abi.ResourceKey, 0, len(keys))
	for i, k := range keys {
		if err := validateKey(i, k); err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	slices.SortStableFunc(out, func(a, b abi.ResourceKey) int {
		if c := strings.Compare(a.Domain, b.Domain); c != 0 {
			return c
		}
		return strings.Compare(a.Key, b.Key)
	})
	// Merge runs of the same (domain, key): exclusive wins.
	n := 0
	for i := 0; i < len(out); i++ {
		if n > 0 && out[n-1].Domain == out[i].Domain && out[n-1].Key == out[i].Key {
			if out[i].Mode == abi.Exclusive {
				out[n-1].Mode = abi.Exclusive
			}
			continue
		}
		out[n] = out[i]
		n++
	}
	return out[:n], nil
}

// conflicts reports whether two modes on the same key exclude each other.
func conflicts(a, b abi.LockMode) bool {
	return a == abi.Exclusive || b == abi.Exclusive
}

// removeHolder removes the first h from holders (order is not kept) and
// clears the vacated slot so the removed holder can be collected. Both the
// resource-key locker and the lease table keep their holders this way.
func removeHolder[T comparable](holders []T, h T) []T {
	for i, x := range holders {
		if x == h {
			last := len(holders) - 1
			holders[i] = holders[last]
			var zero T
			holders[last] = zero
			return holders[:last]
		}
	}
	return holders
}
