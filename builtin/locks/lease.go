package locks

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/hostd-dev/hostd/runtime/catalog"
	"github.com/hostd-dev/hostd/runtime/sched"
	"github.com/hostd-dev/hostd/sdk/abi"
)

// Errors of the lease-lock service and presence. Each maps to one stable
// API code (in parentheses); ErrLocked (locked) and ErrInvalidKey
// (invalid_key) are shared with the resource-key locker.
var (
	// ErrNotHolder (not_holder): the grant does not exist, has been
	// released, evicted or taken over after expiry, or the token is wrong.
	// Nothing was changed.
	ErrNotHolder = errors.New("locks: not holder")
	// ErrExpired (expired): the grant's TTL ran out before the renewal.
	// A renewal never re-acquires.
	ErrExpired = errors.New("locks: grant expired")
	// ErrTTLTooLong (ttl_too_long): the requested TTL exceeds the maximum.
	ErrTTLTooLong = errors.New("locks: ttl too long")
	// ErrCanceled (canceled): the caller's context ended while waiting.
	ErrCanceled = errors.New("locks: canceled")
	// ErrInvalid (invalid_argument): a malformed request other than a
	// bad key (owner, meta, TTL, wait, idempotency key).
	ErrInvalid = errors.New("locks: invalid request")
	// ErrIdempotencyConflict (conflict): an acquire reused an idempotency
	// key of the same principal with a different request (keys and
	// modes, owner, effective TTL or meta). Returned as an
	// *IdempotencyConflictError naming the original grant.
	ErrIdempotencyConflict = errors.New("locks: idempotency key reused with a different request")
)

// Principals. Every grant records the principal that took it: who asked,
// as established by hostd (an API token, a plugin), never a string the
// caller chooses. An idempotent retry returns a grant only to the same
// principal, and the *As methods act only on the given principal's grants.
const (
	// PrincipalInProcess is the principal of requests that name none
	// (in-process callers of Acquire).
	PrincipalInProcess = "in-process"
	// PrincipalAnonymous is the API's principal when auth is off.
	PrincipalAnonymous = "anonymous"
	// MaxPrincipalLen bounds a principal.
	MaxPrincipalLen = 512
)

// TokenPrincipal is the principal of an API request authenticated with
// the token named name ("token:<name>", so no token name can pass for a
// plugin or for anonymous).
func TokenPrincipal(name string) string { return "token:" + name }

// PluginPrincipal is the principal of a plugin's host calls
// ("plugin:<name>").
func PluginPrincipal(name string) string { return "plugin:" + name }

// IdempotencyConflictError is returned (errors.Is ErrIdempotencyConflict)
// when an idempotency key is reused by its principal for a different
// request while the original grant lives. Nothing was acquired.
type IdempotencyConflictError struct {
	Key        string // the idempotency key
	OriginalID string // the grant the key belongs to
}

func (e *IdempotencyConflictError) Error() string {
	return fmt.Sprintf("locks: idempotency key %q was used for a different request (grant %s)", e.Key, e.OriginalID)
}

// Unwrap makes errors.Is(err, ErrIdempotencyConflict) true.
func (e *IdempotencyConflictError) Unwrap() error { return ErrIdempotencyConflict }

// FieldError names the request field a validation error is about (e.g.
// "ttl"); it wraps the package sentinel (ErrInvalid, ErrTTLTooLong).
type FieldError struct {
	Field string
	Err   error
}

func (e *FieldError) Error() string { return e.Err.Error() }

// Unwrap returns the wrapped error.
func (e *FieldError) Unwrap() error { return e.Err }

// MinTTL is the shortest TTL accepted (leases, renewals, presence).
const MinTTL = time.Millisecond

// CheckTTL applies the one TTL rule of leases, renewals and presence:
// 0 means def; otherwise MinTTL <= ttl <= max. Errors are *FieldError
// for field wrapping ErrInvalid (negative, below 1ms) or ErrTTLTooLong.
func CheckTTL(field string, ttl, def, max time.Duration) (time.Duration, error) {
	switch {
	case ttl == 0:
		return def, nil
	case ttl < 0:
		return 0, &FieldError{field, fmt.Errorf("%w: %s %s is negative", ErrInvalid, field, ttl)}
	case ttl < MinTTL:
		return 0, &FieldError{field, fmt.Errorf("%w: %s %s is below the minimum %s (0 means the default)", ErrInvalid, field, ttl, MinTTL)}
	case ttl > max:
		return 0, &FieldError{field, fmt.Errorf("%w: %s %s exceeds the maximum %s", ErrTTLTooLong, field, ttl, max)}
	}
	return ttl, nil
}

// Limits on request fields, so records stay small (catalog records must
// stay well under 1 MiB).
const (
	MaxOwnerLen       = 256
	MaxIdempotencyLen = 256
	MaxMetaEntries    = 32
	MaxMetaBytes      = 4096
	MaxLeaseKeys      = 64
)

// HolderView describes one holder in a conflict or an inspection: never
// its token.
type HolderView struct {
	GrantID   string            `json:"grant_id"`
	Owner     string            `json:"owner"`
	Meta      map[string]string `json:"meta,omitempty"`
	Mode      abi.LockMode      `json:"mode"`
	Fence     uint64            `json:"fence"`
	ExpiresAt time.Time         `json:"expires_at"`
}

// LeaseConflictError is returned (errors.Is ErrLocked) when an acquire
// cannot be granted: it names the first conflicting key (canonical order)
// and its holders' owner and metadata. Nothing was taken and no other
// holder was touched.
type LeaseConflictError struct {
	Key     abi.ResourceKey
	Holders []HolderView
	Waiters int // requests queued on Key ahead of this one
}

func (e *LeaseConflictError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "locks: locked: %s", formatKey(e.Key))
	if len(e.Holders) > 0 {
		b.WriteString(" held by")
		for i, h := range e.Holders {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, " %q (grant %s)", h.Owner, h.GrantID)
		}
	}
	if e.Waiters > 0 {
		fmt.Fprintf(&b, "; %d waiting ahead", e.Waiters)
	}
	return b.String()
}

// Unwrap makes errors.Is(err, ErrLocked) true.
func (e *LeaseConflictError) Unwrap() error { return ErrLocked }

// Options configure the lease-lock service.
type Options struct {
	// Store is the catalog holding grants, the fence sequence and audit
	// records (under catalog.NSLock). Required.
	Store catalog.Store
	// Clock is the time source. Expiry uses its monotonic reading: a
	// clock that implements Monotonic() time.Duration is asked directly,
	// otherwise Now().Sub(start) is used (which is monotonic for
	// sched.Real). Default sched.Real.
	Clock sched.Clock
	// DefaultTTL applies when a request gives no TTL. Default 30s.
	DefaultTTL time.Duration
	// MaxTTL is the longest TTL accepted (longer: ErrTTLTooLong).
	// Default 10m.
	MaxTTL time.Duration
	// PresenceMaxTTL is the longest presence TTL accepted. Default MaxTTL.
	PresenceMaxTTL time.Duration
	// TracerProvider and MeterProvider receive a span per operation and
	// the service's metrics. Default: no-op.
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
	// Logger receives warnings (e.g. recovery decisions). Default: discard.
	Logger *slog.Logger
	// Takeover means the grants were last written by another process
	// whose clock this one cannot trust (a cluster leader taking over
	// from another machine): at open every persisted grant gets its full
	// TTL from now, also one whose stored expiry has passed on this
	// machine's clock — a grant is never dropped because another
	// machine's clock says it expired. Without it (a restart of the same
	// process on the same machine) grants expired by the wall clock are
	// dropped and the others restart their TTL.
	Takeover bool
}

func (o *Options) setDefaults() {
	if o.Clock == nil {
		o.Clock = sched.Real
	}
	if o.DefaultTTL == 0 {
		o.DefaultTTL = 30 * time.Second
	}
	if o.MaxTTL == 0 {
		o.MaxTTL = 10 * time.Minute
	}
	if o.PresenceMaxTTL == 0 {
		o.PresenceMaxTTL = o.MaxTTL
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Validate reports every problem of o at once (after defaults).
func (o Options) Validate() error {
	o.setDefaults()
	var errs []error
	if o.Store == nil {
		errs = append(errs, errors.New("locks: Options.Store is required"))
	}
	if o.DefaultTTL < 0 {
		errs = append(errs, fmt.Errorf("locks: DefaultTTL must be positive, got %s", o.DefaultTTL))
	}
	if o.MaxTTL < 0 {
		errs = append(errs, fmt.Errorf("locks: MaxTTL must be positive, got %s", o.MaxTTL))
	}
	if o.DefaultTTL > o.MaxTTL {
		errs = append(errs, fmt.Errorf("locks: DefaultTTL (%s) exceeds MaxTTL (%s)", o.DefaultTTL, o.MaxTTL))
	}
	if o.PresenceMaxTTL < 0 {
		errs = append(errs, fmt.Errorf("locks: PresenceMaxTTL must be positive, got %s", o.PresenceMaxTTL))
	}
	return errors.Join(errs...)
}

// AcquireRequest asks for a lease on keys.
type AcquireRequest struct {
	// Keys to take, all or nothing (canonicalized: exclusive wins over
	// shared on the same key). 1..MaxLeaseKeys keys.
	Keys []abi.ResourceKey
	// TTL of the grant: 0 = DefaultTTL, else MinTTL..MaxTTL (see
	// CheckTTL).
	TTL time.Duration
	// Wait is how long to queue for the keys; 0 fails at once with a
	// *LeaseConflictError when they are not free.
	Wait time.Duration
	// Owner names the holder (shown to others, never secret). Required.
	Owner string
	// Meta is free-form holder metadata shown in conflicts and Inspect.
	Meta map[string]string
	// IdempotencyKey, if set, makes a retry of the same request by the
	// same Principal return the same grant (token included) while that
	// grant lives. The same key with a different request (keys and modes,
	// owner, effective TTL, meta) is an *IdempotencyConflictError; another
	// principal's key never matches.
	IdempotencyKey string
	// Principal is who asks, as established by the caller's host (see
	// TokenPrincipal, PluginPrincipal, PrincipalAnonymous); never taken
	// from the request body. "" = PrincipalInProcess.
	Principal string
}

// Grant is a granted lease. Token authenticates Renew and Release and is
// shown only to the acquirer.
type Grant struct {
	ID    string            `json:"id"`
	Token string            `json:"token"`
	Owner string            `json:"owner"`
	Meta  map[string]string `json:"meta,omitempty"`
	Keys  []abi.ResourceKey `json:"keys"`
	// Fence is the grant's fencing token, the same for each of its keys:
	// taken from one global persisted strictly increasing sequence.
	Fence     uint64        `json:"fence"`
	TTL       time.Duration `json:"ttl"`
	ExpiresAt time.Time     `json:"expires_at"` // wall clock, for display
	CreatedAt time.Time     `json:"created_at"`
	// Duplicate is set when an idempotent retry returned an existing grant.
	Duplicate bool `json:"duplicate,omitempty"`
	// Principal took the grant ("" for grants persisted before
	// principals were recorded).
	Principal string `json:"principal,omitempty"`
}

// GrantView is a grant as shown by List and Inspect: no token.
type GrantView struct {
	ID        string            `json:"id"`
	Owner     string            `json:"owner"`
	Meta      map[string]string `json:"meta,omitempty"`
	Keys      []abi.ResourceKey `json:"keys"`
	Fence     uint64            `json:"fence"`
	TTL       time.Duration     `json:"ttl"`
	ExpiresAt time.Time         `json:"expires_at"`
	CreatedAt time.Time         `json:"created_at"`
	Principal string            `json:"principal,omitempty"`
}

// WaiterView is one queued acquire on a key.
type WaiterView struct {
	Owner string            `json:"owner"`
	Meta  map[string]string `json:"meta,omitempty"`
	Mode  abi.LockMode      `json:"mode"`
	Since time.Time         `json:"since"`
}

// KeyView is the state of one key: holders (mode, fence, expiry) and
// waiters, never tokens.
type KeyView struct {
	Key     abi.ResourceKey `json:"key"` // Mode: the mode held (shared if free)
	Holders []HolderView    `json:"holders"`
	Waiters []WaiterView    `json:"waiters"`
}

// AuditRecord is written by ForceRelease and kept in the catalog.
type AuditRecord struct {
	ID       uint64            `json:"id"`
	At       time.Time         `json:"at"`
	Action   string            `json:"action"` // "force_release"
	Key      AuditKey          `json:"key"`
	GrantID  string            `json:"grant_id"`
	Owner    string            `json:"owner"`
	Meta     map[string]string `json:"meta,omitempty"`
	OldFence uint64            `json:"old_fence"`
	NewFence uint64            `json:"new_fence"` // the bumped fence
	Reason   string            `json:"reason"`
	Actor    string            `json:"actor,omitempty"`
}

// AuditKey is the key an audit record is about; Mode is "shared" or
// "exclusive" (the evicted grant's mode on it).
type AuditKey struct {
	Domain string `json:"domain"`
	Key    string `json:"key"`
	Mode   string `json:"mode"`
}

// ForceReleaseResult tells what ForceRelease evicted.
type ForceReleaseResult struct {
	Evicted []GrantView   `json:"evicted"`
	Fence   uint64        `json:"fence"` // bumped fence: above every evicted one
	Audit   []AuditRecord `json:"audit"`
}

func validateOwnerMeta(owner string, meta map[string]string) error {
	if owner == "" {
		return fmt.Errorf("%w: owner is required", ErrInvalid)
	}
	if len(owner) > MaxOwnerLen {
		return fmt.Errorf("%w: owner longer than %d bytes", ErrInvalid, MaxOwnerLen)
	}
	if len(meta) > MaxMetaEntries {
		return fmt.Errorf("%w: more than %d meta entries", ErrInvalid, MaxMetaEntries)
	}
	n := 0
	for k, v := range meta {
		n += len(k) + len(v)
	}
	if n > MaxMetaBytes {
		return fmt.Errorf("%w: meta larger than %d bytes", ErrInvalid, MaxMetaBytes)
	}
	return nil
}

func cloneMeta(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
