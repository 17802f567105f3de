package sdktest

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/hostd-dev/hostd/sdk"
	"github.com/hostd-dev/hostd/sdk/abi"
)

// backend serves sdk's host services from a Harness (sdk.Backend).
type backend struct{ h *Harness }

var _ sdk.Backend = backend{}

func noContext(what string) error {
	return &sdk.HostError{Status: abi.StatusNoContext, Message: what + " outside a handler call"}
}

// get reads key through the staged writes. h.mu held.
func (h *Harness) get(key string) ([]byte, bool) {
	if v, ok := h.stage[key]; ok {
		if v == nil {
			return nil, false
		}
		return *v, true
	}
	v, ok := h.kv[key]
	return v, ok
}

func (b backend) KVGet(key string) ([]byte, bool, error) {
	h := b.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.inCall {
		return nil, false, noContext("kv_get")
	}
	v, ok := h.get(key)
	if !ok {
		return nil, false, nil
	}
	return append([]byte(nil), v...), true, nil
}

// usage returns keys and bytes of the KV as the running callback sees it.
func (h *Harness) usage() (keys, bytes int) {
	for k, v := range h.kv {
		if _, staged := h.stage[k]; !staged {
			keys++
			bytes += len(k) + len(v)
		}
	}
	for k, v := range h.stage {
		if v != nil {
			keys++
			bytes += len(k) + len(*v)
		}
	}
	return keys, bytes
}

func (b backend) write(key string, value []byte, del bool) error {
	h := b.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.inCall {
		return noContext("kv write")
	}
	if h.readOnly {
		return &sdk.HostError{Status: abi.StatusReadOnly, Message: "plugin KV is read-only in validators, resource-key functions and policies"}
	}
	prev, had := h.stage[key]
	if del {
		h.stage[key] = nil
	} else {
		v := append([]byte(nil), value...)
		h.stage[key] = &v
	}
	if !del && (h.maxKeys > 0 || h.maxBytes > 0) {
		keys, bytes := h.usage()
		if (h.maxKeys > 0 && keys > h.maxKeys) || (h.maxBytes > 0 && bytes > h.maxBytes) {
			if had {
				h.stage[key] = prev
			} else {
				delete(h.stage, key)
			}
			return &sdk.HostError{Status: abi.StatusQuota, Message: fmt.Sprintf(
				"put %q: plugin KV would hold %d keys / %d bytes (quota %d keys / %d bytes)", key, keys, bytes, h.maxKeys, h.maxBytes)}
		}
	}
	return nil
}

func (b backend) KVPut(key string, value []byte) error { return b.write(key, value, false) }
func (b backend) KVDelete(key string) error            { return b.write(key, nil, true) }

func (b backend) KVScan(prefix, after string, limit int) ([]sdk.KV, bool, error) {
	h := b.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.inCall {
		return nil, false, noContext("kv_scan")
	}
	keys := map[string]bool{}
	for k := range h.kv {
		keys[k] = true
	}
	for k := range h.stage {
		keys[k] = true
	}
	var sorted []string
	for k := range keys {
		if strings.HasPrefix(k, prefix) && k > after {
			sorted = append(sorted, k)
		}
	}
	sort.Strings(sorted)
	var out []sdk.KV
	for _, k := range sorted {
		v, ok := h.get(k)
		if !ok {
			continue
		}
		if len(out) == limit {
			return out, true, nil
		}
		out = append(out, sdk.KV{Key: k, Value: append([]byte(nil), v...)})
	}
	return out, false, nil
}

func (b backend) Config(key string) (string, bool) {
	b.h.mu.Lock()
	defer b.h.mu.Unlock()
	v, ok := b.h.config[key]
	return v, ok
}

func (b backend) Log(level int32, msg string) {
	b.h.mu.Lock()
	b.h.logs = append(b.h.logs, Log{Level: level, Msg: msg})
	b.h.mu.Unlock()
	b.h.t.Logf("plugin %s %s", levelName(level), msg)
}

func (b backend) SpanEvent(name string, attrs []abi.Attr) {
	b.h.mu.Lock()
	defer b.h.mu.Unlock()
	b.h.events = append(b.h.events, SpanEvent{Name: name, Attrs: append([]abi.Attr(nil), attrs...)})
}

func (b backend) SpanAttrs(attrs []abi.Attr) {
	b.h.mu.Lock()
	defer b.h.mu.Unlock()
	b.h.attrs = append(b.h.attrs, attrs...)
}

func (b backend) Now() time.Time {
	b.h.mu.Lock()
	now := b.h.now
	b.h.mu.Unlock()
	return now()
}

// KV is the harness's committed plugin KV.
type KV struct{ h *Harness }

// Get returns the committed value of key.
func (kv *KV) Get(key string) ([]byte, bool) {
	kv.h.mu.Lock()
	defer kv.h.mu.Unlock()
	v, ok := kv.h.kv[key]
	return append([]byte(nil), v...), ok
}

// Put sets key (to seed state before a call).
func (kv *KV) Put(key string, value []byte) {
	kv.h.mu.Lock()
	defer kv.h.mu.Unlock()
	kv.h.kv[key] = append([]byte(nil), value...)
}

// Delete removes key.
func (kv *KV) Delete(key string) {
	kv.h.mu.Lock()
	defer kv.h.mu.Unlock()
	delete(kv.h.kv, key)
}

// Len returns the number of keys.
func (kv *KV) Len() int {
	kv.h.mu.Lock()
	defer kv.h.mu.Unlock()
	return len(kv.h.kv)
}

// Keys returns every key in order.
func (kv *KV) Keys() []string {
	kv.h.mu.Lock()
	defer kv.h.mu.Unlock()
	keys := make([]string, 0, len(kv.h.kv))
	for k := range kv.h.kv {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Map returns a copy of the KV with string values, handy for comparisons.
func (kv *KV) Map() map[string]string {
	kv.h.mu.Lock()
	defer kv.h.mu.Unlock()
	m := make(map[string]string, len(kv.h.kv))
	for k, v := range kv.h.kv {
		m[k] = string(v)
	}
	return m
}
