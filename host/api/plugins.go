package api

import (
	"context"
	"errors"
	"net/http"
	"sort"
	"strconv"
	"unicode/utf8"

	"github.com/hostd-dev/hostd/runtime/catalog"
	"github.com/hostd-dev/hostd/runtime/wasm"
	"github.com/hostd-dev/hostd/sdk/abi"
	"github.com/hostd-dev/hostd/wire"
)

// Error codes of the plugin routes (docs/api.md).
const (
	// CodePluginInUse: 412, a reload would remove a message type that
	// pending broadcasts still need; nothing was changed.
	CodePluginInUse = "plugin_in_use"
)

// PluginService is what the plugin routes need (*wasm.Runtime).
type PluginService interface {
	List() []wasm.Info
	Reload(ctx context.Context) error
	KVGet(ctx context.Context, plugin string, key []byte) ([]byte, catalog.Version, error)
	KVScan(ctx context.Context, plugin string, prefix, after []byte, limit int) ([]abi.KVPair, []byte, error)
}

// PluginKVWriter writes a plugin's KV for operators and lease holders
// (host: the catalog, with the lease service's fence checks).
type PluginKVWriter interface {
	// KVWrite commits w in one catalog batch; with a fence, the batch also
	// re-checks that the fence is still a current holder's (errors of the
	// lease service, e.g. not_holder, when it is not). It returns the
	// commit's version.
	KVWrite(ctx context.Context, w KVWrite) (catalog.Version, error)
}

// KVWrite is one put or delete of a plugin KV key.
type KVWrite struct {
	Plugin string
	Key    []byte
	Value  []byte
	Delete bool
	// Fence, if set, must be a current holder's fence on Fence.Key when
	// the write commits.
	Fence *abi.FencedKey
	// By is the caller's token name (for the log).
	By string
	// Principal is the caller's lease principal (LeasePrincipal): a
	// fenced write passes only with a fence of a grant it took.
	Principal string
}

// KVFence names the lease lock whose fence a plugin KV write carries.
type KVFence = wire.KVFence

// PluginKVPutRequest is the body of PUT /v1/plugins/{name}/kv/{key...}:
// the value as base64 (value) or as text (value_text), and an optional
// fence.
type PluginKVPutRequest = wire.PluginKVPutRequest

// PluginLoadError is one plugin that failed to load in a reload.
type PluginLoadError = wire.PluginLoadError

// ReloadResponse is the answer of POST /v1/plugins/reload: the plugins
// after the reload, and the files that failed to load (their previous
// version, if any, keeps running).
type ReloadResponse = wire.PluginReload

// PluginKV is one plugin KV entry. Value is base64 in JSON; ValueText is
// the value as text when it is valid UTF-8.
type PluginKV = wire.PluginKV

func pluginKV(k, v []byte, ver catalog.Version) PluginKV {
	out := PluginKV{Key: string(k), Value: v, Version: uint64(ver)}
	if out.Value == nil {
		out.Value = []byte{}
	}
	if utf8.Valid(v) {
		s := string(v)
		out.ValueText = &s
	}
	return out
}

// RegisterPlugins adds the plugin routes:
//
//	GET  /v1/plugins                      list (name, sha256, ABI, registrations, pool, calls, failures, errors)
//	POST /v1/plugins/reload               reload from the directory and config (admin)
//	GET  /v1/plugins/{name}/kv/{key...}   one KV entry
//	GET  /v1/plugins/{name}/kv            KV entries; ?prefix=&limit=&page_token=
func pluginsJSON(in []wasm.Info) []wire.Plugin {
	if in == nil {
		return nil
	}
	out := make([]wire.Plugin, len(in))
	for i, p := range in {
		out[i] = wire.Plugin{Name: p.Name, Path: p.Path, SHA256: p.SHA256, ABI: p.ABI, PoolSize: p.PoolSize,
			Live: p.Live, Calls: p.Calls, Failures: p.Failures, StartFailures: p.StartFailures, LoadedAt: p.LoadedAt,
			Interrupt: p.Interrupt, InterruptReason: p.InterruptReason, Error: p.Error}
		out[i].Registrations = make([]wire.PluginRegistration, len(p.Registrations)) // [] rather than null
		for j, r := range p.Registrations {
			out[i].Registrations[j] = wire.PluginRegistration{Kind: r.Kind, Name: r.Name, Role: r.Role}
		}
	}
	return out
}

func RegisterPlugins(s *Server, svc PluginService) {
	s.Handle("GET /v1/plugins", RoleRead, func(w http.ResponseWriter, r *http.Request) error {
		page, err := PageParams(r)
		if err != nil {
			return err
		}
		after, err := DecodePageToken(page.Token)
		if err != nil {
			return err
		}
		all := svc.List()
		i := sort.Search(len(all), func(i int) bool { return all[i].Name > string(after) })
		items, next := all[i:], ""
		if len(items) > page.Limit {
			items = items[:page.Limit]
			next = EncodePageToken([]byte(items[len(items)-1].Name))
		}
		return WriteList(w, pluginsJSON(items), next)
	})
	s.Handle("POST /v1/plugins/reload", RoleAdmin, func(w http.ResponseWriter, r *http.Request) error {
		err := svc.Reload(r.Context())
		resp := ReloadResponse{Errors: []PluginLoadError{}}
		if err != nil {
			var les []*wasm.LoadError
			collectLoadErrors(err, &les)
			if len(les) == 0 {
				return err
			}
			for _, le := range les {
				resp.Errors = append(resp.Errors, PluginLoadError{Plugin: le.Plugin, Path: le.Path, Message: le.Err.Error()})
			}
		}
		resp.Items = pluginsJSON(svc.List())
		if resp.Items == nil {
			resp.Items = []wire.Plugin{}
		}
		return WriteJSON(w, http.StatusOK, resp)
	})
	s.Handle("GET /v1/plugins/{name}/kv/{key...}", RoleRead, func(w http.ResponseWriter, r *http.Request) error {
		name, key := r.PathValue("name"), r.PathValue("key")
		if key == "" {
			return InvalidField("key", "key is required")
		}
		v, ver, err := svc.KVGet(r.Context(), name, []byte(key))
		if errors.Is(err, catalog.ErrNotFound) {
			return NotFound("plugin %s has no KV key %q", name, key)
		}
		if err != nil {
			return err
		}
		return WriteJSON(w, http.StatusOK, pluginKV([]byte(key), v, ver))
	})
	s.Handle("GET /v1/plugins/{name}/kv", RoleRead, func(w http.ResponseWriter, r *http.Request) error {
		page, err := PageParams(r)
		if err != nil {
			return err
		}
		after, err := DecodePageToken(page.Token)
		if err != nil {
			return err
		}
		entries, next, err := svc.KVScan(r.Context(), r.PathValue("name"), []byte(r.URL.Query().Get("prefix")), after, page.Limit)
		if err != nil {
			return err
		}
		items := make([]PluginKV, len(entries))
		for i, e := range entries {
			items[i] = pluginKV(e.Key, e.Value, 0)
		}
		return WriteList(w, items, EncodePageToken(next))
	})
	s.MapErrors(pluginError)
}

// RegisterPluginKVWrites adds the plugin KV write routes:
//
//	PUT    /v1/plugins/{name}/kv/{key...}   put; body {value | value_text, fence?}
//	DELETE /v1/plugins/{name}/kv/{key...}   delete; ?fence_domain=&fence_key=&fence=
//
// A fenced write ({"fence": {"domain", "key", "fence"}}) needs role write:
// it commits only while the fence is the current fence of a grant on that
// lease lock taken by the caller's principal (LeasePrincipal), re-checked
// in the committing catalog transaction like a plugin's kv_put_fenced,
// else 409 not_holder and nothing is written. An
// unfenced write overrides a plugin's state and needs role admin.
func RegisterPluginKVWrites(s *Server, svc PluginKVWriter) {
	write := func(w http.ResponseWriter, r *http.Request, kw KVWrite, fence *KVFence) error {
		kw.Plugin, kw.Key = r.PathValue("name"), []byte(r.PathValue("key"))
		if !wasm.ValidName(kw.Plugin) {
			return InvalidField("name", "invalid plugin name %q", kw.Plugin)
		}
		if len(kw.Key) == 0 || len(kw.Key) > abi.MaxKeyLen {
			return InvalidField("key", "key must be 1..%d bytes", abi.MaxKeyLen)
		}
		if len(kw.Value) > abi.MaxValueLen {
			return TooLarge("value is %d bytes; at most %d", len(kw.Value), abi.MaxValueLen)
		}
		p, _ := PrincipalFrom(r.Context())
		kw.By = p.Name
		kw.Principal = LeasePrincipal(r.Context())
		if fence == nil {
			if p.Role < RoleAdmin {
				return PermissionDenied("token %q has role %s; an unfenced plugin KV write needs admin (a fenced one needs write)", p.Name, p.Role).
					With("role", p.Role.String()).With("required_role", RoleAdmin.String())
			}
		} else {
			if fence.Domain == "" || fence.Key == "" || len(fence.Domain) > abi.MaxKeyLen || len(fence.Key) > abi.MaxKeyLen {
				return InvalidField("fence", "fence domain and key must be 1..%d bytes", abi.MaxKeyLen)
			}
			if fence.Fence == 0 {
				return InvalidField("fence", "fence must be a positive fence number of a lease grant")
			}
			kw.Fence = &abi.FencedKey{Key: abi.ResourceKey{Domain: fence.Domain, Key: fence.Key}, Fence: fence.Fence}
		}
		ver, err := svc.KVWrite(r.Context(), kw)
		if err != nil {
			if e := lockError(err); e != nil {
				return e.Wrap(err)
			}
			if errors.Is(err, catalog.ErrConflict) {
				return Conflict("plugin %s KV key %q: %v; retry", kw.Plugin, kw.Key, err).Wrap(err)
			}
			return err
		}
		if kw.Delete {
			return WriteJSON(w, http.StatusOK, wire.PluginKVDeleted{Key: string(kw.Key), Deleted: true})
		}
		return WriteJSON(w, http.StatusOK, pluginKV(kw.Key, kw.Value, ver))
	}
	s.Handle("PUT /v1/plugins/{name}/kv/{key...}", RoleWrite, func(w http.ResponseWriter, r *http.Request) error {
		var body PluginKVPutRequest
		if err := DecodeJSON(r, &body); err != nil {
			return err
		}
		kw := KVWrite{Value: body.Value}
		if body.ValueText != nil {
			if body.Value != nil {
				return InvalidField("value_text", "give value (base64) or value_text, not both")
			}
			kw.Value = []byte(*body.ValueText)
		}
		if kw.Value == nil {
			kw.Value = []byte{}
		}
		return write(w, r, kw, body.Fence)
	})
	s.Handle("DELETE /v1/plugins/{name}/kv/{key...}", RoleWrite, func(w http.ResponseWriter, r *http.Request) error {
		q := r.URL.Query()
		var fence *KVFence
		if q.Has("fence") || q.Has("fence_domain") || q.Has("fence_key") {
			n, err := strconv.ParseUint(q.Get("fence"), 10, 64)
			if err != nil {
				return InvalidField("fence", "fence must be a positive integer, got %q", q.Get("fence"))
			}
			fence = &KVFence{Domain: q.Get("fence_domain"), Key: q.Get("fence_key"), Fence: n}
		}
		return write(w, r, KVWrite{Delete: true}, fence)
	})
	s.MapErrors(pluginError)
}

func collectLoadErrors(err error, out *[]*wasm.LoadError) {
	var le *wasm.LoadError
	if errors.As(err, &le) {
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				collectLoadErrors(e, out)
			}
			return
		}
		*out = append(*out, le)
	}
}

func pluginError(err error) *Error {
	switch {
	case errors.Is(err, wasm.ErrInUse):
		return Errorf(http.StatusPreconditionFailed, CodePluginInUse, "%s", err.Error()).Wrap(err)
	case errors.Is(err, wasm.ErrUnknownPlugin):
		return NotFound("%s", err.Error()).Wrap(err)
	case errors.Is(err, wasm.ErrNotFound):
		return InvalidField("name", "%s", err.Error()).Wrap(err)
	case errors.Is(err, wasm.ErrClosed):
		return Errorf(http.StatusServiceUnavailable, CodeUnavailable, "plugin runtime is shut down").Wrap(err)
	}
	return nil
}
