package api

import (
	"context"
	"errors"
	"net/http"
	"sort"
	"unicode/utf8"

	"github.com/hostd-dev/hostd/runtime/catalog"
	"github.com/hostd-dev/hostd/runtime/wasm"
	"github.com/hostd-dev/hostd/sdk/abi"
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

// PluginLoadError is one plugin that failed to load in a reload.
type PluginLoadError struct {
	Plugin  string `json:"plugin"`
	Path    string `json:"path"`
	Message string `json:"message"`
}

// ReloadResponse is the answer of POST /v1/plugins/reload: the plugins
// after the reload, and the files that failed to load (their previous
// version, if any, keeps running).
type ReloadResponse struct {
	Items  []wasm.Info       `json:"items"`
	Errors []PluginLoadError `json:"errors"`
}

// PluginKV is one plugin KV entry. Value is base64 in JSON; ValueText is
// the value as text when it is valid UTF-8.
type PluginKV struct {
	Key       string  `json:"key"`
	Value     []byte  `json:"value"`
	ValueText *string `json:"value_text,omitempty"`
	Version   uint64  `json:"version,omitempty"`
}

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
		return WriteList(w, items, next)
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
		resp.Items = svc.List()
		if resp.Items == nil {
			resp.Items = []wasm.Info{}
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
	case errors.Is(err, wasm.ErrNotFound):
		return InvalidField("name", "%s", err.Error()).Wrap(err)
	case errors.Is(err, wasm.ErrClosed):
		return Errorf(http.StatusServiceUnavailable, CodeUnavailable, "plugin runtime is shut down").Wrap(err)
	}
	return nil
}
