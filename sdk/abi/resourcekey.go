package abi

// LockMode is how a resource key is locked.
type LockMode uint8

const (
	// Shared: many holders at once; conflicts only with Exclusive.
	Shared LockMode = 0
	// Exclusive: one holder; conflicts with everything on the same key.
	Exclusive LockMode = 1
)

// String returns "shared" or "exclusive".
func (m LockMode) String() string {
	if m == Exclusive {
		return "exclusive"
	}
	return "shared"
}

// Well-known resource-key domains. Any other non-empty string is a valid
// domain too (plugins may use their own).
const (
	DomainCluster    = "cluster"
	DomainDatabase   = "database"
	DomainCollection = "collection"
)

// ResourceKey names one lockable resource: a broadcast declares the keys it
// touches, and conflicting broadcasts are serialized on them.
// It is shared by the host (lockers, the broadcast engine) and guests
// (resource-key functions registered by plugins).
type ResourceKey struct {
	Domain string   `json:"domain"`
	Key    string   `json:"key"`
	Mode   LockMode `json:"mode"`
}
