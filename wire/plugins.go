package wire

import "time"

// Plugin describes one loaded plugin (GET /v1/plugins).
type Plugin struct {
	Name          string               `json:"name"`
	Path          string               `json:"path"`
	SHA256        string               `json:"sha256,omitempty"`
	ABI           int                  `json:"abi"`
	Registrations []PluginRegistration `json:"registrations"`
	PoolSize      int                  `json:"pool_size"`
	Live          int64                `json:"live_instances"`
	Calls         uint64               `json:"calls"`
	Failures      uint64               `json:"failures"`
	StartFailures int64                `json:"start_failures"`
	LoadedAt      time.Time            `json:"loaded_at"`
	// Interrupt is how a call timeout stops the plugin's guest:
	// "instrumented" or "close-on-context-done" (see InterruptReason).
	Interrupt       string `json:"interrupt,omitempty"`
	InterruptReason string `json:"interrupt_reason,omitempty"`
	// Error is the last load error of this plugin ("" if its file loaded);
	// a plugin with an error and no SHA256 is not running.
	Error string `json:"error,omitempty"`
}

// PluginRegistration is one handler a plugin registered.
type PluginRegistration struct {
	Kind string `json:"kind"`
	Name string `json:"name"`
	// Role is, for message types, the role a token needs to broadcast
	// the type ("write" or "admin"); empty for policies.
	Role string `json:"role,omitempty"`
}

// PluginLoadError is one plugin file that failed to load on a reload.
type PluginLoadError struct {
	Plugin  string `json:"plugin"`
	Path    string `json:"path"`
	Message string `json:"message"`
}

// PluginReload is the answer of POST /v1/plugins/reload. Items and
// Errors are the plugin runtime's: the daemon's, or in cluster mode the
// leader's (empty when the leader did not answer).
type PluginReload struct {
	Items  []Plugin          `json:"items"`
	Errors []PluginLoadError `json:"errors"`
	// Members (cluster mode only) is every replica's outcome: each one
	// re-read, re-hashed and precompiled its plugin files, and the leader
	// also reloaded its runtime.
	Members []PluginReloadMember `json:"members,omitempty"`
}

// PluginReloadMember is one cluster replica's outcome of a plugin reload.
type PluginReloadMember struct {
	Name    string `json:"name"`
	Address string `json:"address"`
	Leader  bool   `json:"leader"`
	// Outcome is "ok", "error" (the replica answered with an error, in
	// Error, or some of its files failed, in Errors) or "unreachable".
	Outcome string `json:"outcome"`
	Error   string `json:"error,omitempty"`
	// Plugins maps each plugin name to the SHA-256 of the file the
	// replica read in this reload.
	Plugins map[string]string `json:"plugins,omitempty"`
	// Errors are the files that failed to compile or load there.
	Errors []PluginLoadError `json:"errors,omitempty"`
}

// PluginKV is one plugin KV entry. Value is base64; ValueText is the same
// value when it is valid UTF-8.
type PluginKV struct {
	Key       string  `json:"key"`
	Value     []byte  `json:"value"`
	ValueText *string `json:"value_text,omitempty"`
	Version   uint64  `json:"version,omitempty"`
}

// KVFence makes a plugin KV write conditional on a lease fence being
// current.
type KVFence struct {
	Domain string `json:"domain"`
	Key    string `json:"key"`
	Fence  uint64 `json:"fence"`
}

// PluginKVPutRequest is the body of PUT /v1/plugins/{name}/kv/{key}: value
// (base64) or value_text, and an optional fence.
type PluginKVPutRequest struct {
	Value     []byte   `json:"value,omitempty"`
	ValueText *string  `json:"value_text,omitempty"`
	Fence     *KVFence `json:"fence,omitempty"`
}

// PluginKVDeleted is the answer of DELETE /v1/plugins/{name}/kv/{key}.
type PluginKVDeleted struct {
	Key     string `json:"key"`
	Deleted bool   `json:"deleted"`
}
