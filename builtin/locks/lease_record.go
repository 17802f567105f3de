package locks

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/hostd-dev/hostd/runtime/catalog"
	"github.com/hostd-dev/hostd/sdk/abi"
)

// Catalog layout (all under catalog.NSLock, "lk/"):
//
//	lk/g/<fence, 20 digits>  grant record (JSON grantRecord); its version is
//	                         what fenced writes check (see FenceCheck)
//	lk/e/<fence, 20 digits>  latest renewal of that grant (JSON renewalRecord)
//	lk/a/<id, 20 digits>     audit record (JSON AuditRecord)
//
// and the catalog sequences "locks.fence" (fences = grant ids) and
// "locks.audit". A free key has no record: fences come from the global
// sequence, so nothing per key needs to survive its last holder.
const (
	grantPrefix   = catalog.NSLock + "g/"
	renewalPrefix = catalog.NSLock + "e/"
	auditPrefix   = catalog.NSLock + "a/"
	fenceSequence = "locks.fence"
	auditSequence = "locks.audit"
	recordVersion = 1
)

// seqKey is prefix + n as 20 zero-padded digits (so keys sort by n).
func seqKey(prefix string, n uint64) []byte {
	b := make([]byte, len(prefix)+20)
	copy(b, prefix)
	for i := len(b) - 1; i >= len(prefix); i-- {
		b[i] = byte('0' + n%10)
		n /= 10
	}
	return b
}

func grantKey(fence uint64) []byte   { return seqKey(grantPrefix, fence) }
func renewalKey(fence uint64) []byte { return seqKey(renewalPrefix, fence) }
func auditKey(id uint64) []byte      { return seqKey(auditPrefix, id) }

// parseSeqKey returns the number of a key built by seqKey.
func parseSeqKey(prefix string, k []byte) (uint64, error) {
	if len(k) != len(prefix)+20 || string(k[:len(prefix)]) != prefix {
		return 0, fmt.Errorf("locks: malformed record key %q", k)
	}
	return strconv.ParseUint(string(k[len(prefix):]), 10, 64)
}

type keyRecord struct {
	Domain string `json:"d"`
	Key    string `json:"k"`
	Mode   string `json:"m"` // "s" or "x"
}

type grantRecord struct {
	V     int               `json:"v"`
	Fence uint64            `json:"fence"`
	Token string            `json:"token"`
	Owner string            `json:"owner"`
	Meta  map[string]string `json:"meta,omitempty"`
	Keys  []keyRecord       `json:"keys"`
	TTLms int64             `json:"ttl_ms"`
	Idem  string            `json:"idem,omitempty"`
	// Principal took the grant. Records written before principals were
	// recorded have none: their idempotency key then matches no retry
	// (the grant itself, its token and fence are unaffected).
	Principal string `json:"principal,omitempty"`
	// FP is the fingerprint of the acquire request (see fingerprint):
	// an idempotent retry must present the same. Without one (older
	// records) the key alone matches.
	FP        string    `json:"fp,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at"`
}

type renewalRecord struct {
	V         int       `json:"v"`
	TTLms     int64     `json:"ttl_ms"`
	ExpiresAt time.Time `json:"expires_at"`
}

func encodeKeys(keys []abi.ResourceKey) []keyRecord {
	out := make([]keyRecord, len(keys))
	for i, k := range keys {
		m := "s"
		if k.Mode == abi.Exclusive {
			m = "x"
		}
		out[i] = keyRecord{Domain: k.Domain, Key: k.Key, Mode: m}
	}
	return out
}

func encodeGrant(g *lgrant) []byte {
	b, _ := json.Marshal(grantRecord{
		V: recordVersion, Fence: g.fence, Token: g.token, Owner: g.owner, Meta: g.meta,
		Keys: encodeKeys(g.keys), TTLms: g.ttl.Milliseconds(), Idem: g.idem,
		Principal: g.principal, FP: g.fp, CreatedAt: g.createdAt, ExpiresAt: g.expiresAt,
	})
	return b
}

func encodeRenewal(ttl time.Duration, expires time.Time) []byte {
	b, _ := json.Marshal(renewalRecord{V: recordVersion, TTLms: ttl.Milliseconds(), ExpiresAt: expires})
	return b
}

// decodeGrant parses and validates a grant record read from the catalog.
// It never panics on bad bytes.
func decodeGrant(k, v []byte) (*grantRecord, []abi.ResourceKey, error) {
	fence, err := parseSeqKey(grantPrefix, k)
	if err != nil {
		return nil, nil, err
	}
	var r grantRecord
	if err := json.Unmarshal(v, &r); err != nil {
		return nil, nil, fmt.Errorf("locks: grant record %s: %w", k, err)
	}
	if r.V != recordVersion {
		return nil, nil, fmt.Errorf("locks: grant record %s: unknown version %d", k, r.V)
	}
	if r.Fence != fence {
		return nil, nil, fmt.Errorf("locks: grant record %s: fence %d does not match its key", k, r.Fence)
	}
	if len(r.Principal) > MaxPrincipalLen {
		return nil, nil, fmt.Errorf("locks: grant record %s: principal longer than %d bytes", k, MaxPrincipalLen)
	}
	if r.Token == "" || r.Owner == "" || r.TTLms <= 0 {
		return nil, nil, fmt.Errorf("locks: grant record %s: missing token, owner or ttl", k)
	}
	keys := make([]abi.ResourceKey, len(r.Keys))
	for i, kr := range r.Keys {
		keys[i] = abi.ResourceKey{Domain: kr.Domain, Key: kr.Key}
		switch kr.Mode {
		case "s":
		case "x":
			keys[i].Mode = abi.Exclusive
		default:
			return nil, nil, fmt.Errorf("locks: grant record %s: bad mode %q", k, kr.Mode)
		}
	}
	ck, err := canonicalNonEmpty(keys)
	if err != nil {
		return nil, nil, fmt.Errorf("locks: grant record %s: %w", k, err)
	}
	return &r, ck, nil
}

func decodeRenewal(k, v []byte) (uint64, *renewalRecord, error) {
	fence, err := parseSeqKey(renewalPrefix, k)
	if err != nil {
		return 0, nil, err
	}
	var r renewalRecord
	if err := json.Unmarshal(v, &r); err != nil {
		return 0, nil, fmt.Errorf("locks: renewal record %s: %w", k, err)
	}
	if r.V != recordVersion || r.TTLms <= 0 {
		return 0, nil, fmt.Errorf("locks: renewal record %s: bad version or ttl", k)
	}
	return fence, &r, nil
}

// fingerprint identifies an acquire request for idempotency: the owner,
// the canonical keys with their modes, the effective TTL and the meta
// (sorted), each length-prefixed so no two requests share an encoding.
// The idempotency key and the principal are not part of it (they select
// the entry; the fingerprint says whether the retry is the same request).
func fingerprint(r *leaseReq) string {
	var b []byte
	str := func(s string) {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	str(r.owner)
	b = binary.AppendUvarint(b, uint64(len(r.keys)))
	for _, k := range r.keys {
		str(k.Domain)
		str(k.Key)
		b = append(b, byte(k.Mode))
	}
	b = binary.AppendVarint(b, int64(r.ttl))
	mk := make([]string, 0, len(r.meta))
	for k := range r.meta {
		mk = append(mk, k)
	}
	sort.Strings(mk)
	b = binary.AppendUvarint(b, uint64(len(mk)))
	for _, k := range mk {
		str(k)
		str(r.meta[k])
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}
