package locks

import (
	"testing"
	"time"

	"github.com/hostd-dev/hostd/sdk/abi"
)

// FuzzDecodeGrant feeds arbitrary catalog bytes to the grant and renewal
// decoders: they must never panic, and what they accept re-encodes to a
// record that decodes to the same grant.
func FuzzDecodeGrant(f *testing.F) {
	g := &lgrant{fence: 7, token: "t", owner: "o", meta: map[string]string{"a": "b"},
		keys: []abi.ResourceKey{ex("d", "k"), sh("e", "k")}, ttl: time.Second, idem: "i",
		principal: "token:ops", fp: "00ff", createdAt: time.Unix(1, 0).UTC(), expiresAt: time.Unix(2, 0).UTC()}
	f.Add(grantKey(7), encodeGrant(g))
	f.Add(renewalKey(7), encodeRenewal(time.Second, time.Unix(3, 0)))
	f.Add([]byte("lk/g/x"), []byte(`{"v":1}`))
	f.Add(grantKey(1), []byte(`{"v":1,"fence":1,"token":"t","owner":"o","ttl_ms":5,"keys":[{"d":"","k":"k","m":"x"}]}`))
	f.Fuzz(func(t *testing.T, k, v []byte) {
		if r, keys, err := decodeGrant(k, v); err == nil {
			g := &lgrant{fence: r.Fence, token: r.Token, owner: r.Owner, meta: r.Meta, keys: keys,
				ttl: time.Duration(r.TTLms) * time.Millisecond, idem: r.Idem, principal: r.Principal, fp: r.FP, createdAt: r.CreatedAt, expiresAt: r.ExpiresAt}
			r2, keys2, err := decodeGrant(grantKey(r.Fence), encodeGrant(g))
			if err != nil || r2.Token != r.Token || r2.Principal != r.Principal || r2.FP != r.FP || len(keys2) != len(keys) {
				t.Fatalf("re-encode: %v", err)
			}
		}
		_, _, _ = decodeRenewal(k, v)
	})
}
