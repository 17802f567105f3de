package client

import (
	"context"
	"net/url"
	"strconv"
	"strings"

	"github.com/hostd-dev/hostd/wire"
)

// Plugin describes one plugin (GET /v1/plugins).
type Plugin = wire.Plugin

// PluginRegistration is one handler a plugin registered: kind "ack",
// "validator", "resource-keys" or "policy", and the message type or policy
// name.
type PluginRegistration = wire.PluginRegistration

// PluginLoadError is a plugin file that failed to load in a reload.
type PluginLoadError = wire.PluginLoadError

// PluginReload is the answer of ReloadPlugins.
type PluginReload = wire.PluginReload

// PluginReloadMember is one cluster replica's outcome of a reload.
type PluginReloadMember = wire.PluginReloadMember

// PluginKV is one entry of a plugin's KV. ValueText is set when the value
// is valid UTF-8.
type PluginKV = wire.PluginKV

// ListPlugins lists the plugins, loaded or failed.
func (c *Client) ListPlugins(ctx context.Context, p Page) (*List[Plugin], error) {
	var out List[Plugin]
	return &out, c.Do(ctx, "GET", p.Query("/v1/plugins"), nil, &out)
}

// ReloadPlugins reloads the plugins (admin). Files that fail to load are
// listed in Errors (their previous version keeps running); a reload that
// would remove a message type in use fails with code "plugin_in_use".
// In cluster mode the reload reaches every replica: Members lists each
// one's outcome (ok, error, unreachable), and Items and Errors are the
// leader's.
func (c *Client) ReloadPlugins(ctx context.Context) (*PluginReload, error) {
	var out PluginReload
	return &out, c.Do(ctx, "POST", "/v1/plugins/reload", nil, &out)
}

// GetPluginKV reads one key of a plugin's KV (IsNotFound if absent).
func (c *Client) GetPluginKV(ctx context.Context, plugin, key string) (*PluginKV, error) {
	var out PluginKV
	return &out, c.Do(ctx, "GET", pluginKVPath(plugin, key), nil, &out)
}

// ScanPluginKV lists a plugin's KV entries whose key starts with prefix.
func (c *Client) ScanPluginKV(ctx context.Context, plugin, prefix string, p Page) (*List[PluginKV], error) {
	path := "/v1/plugins/" + url.PathEscape(plugin) + "/kv"
	if prefix != "" {
		path += "?prefix=" + url.QueryEscape(prefix)
	}
	var out List[PluginKV]
	return &out, c.Do(ctx, "GET", p.Query(path), nil, &out)
}

// escapeKey escapes a KV key as one path segment: every '/' becomes %2F
// and every '.' %2E, so that keys such as "../x", "a//b" or ".." reach the
// server intact instead of being read as path structure (dot segments are
// removed and slashes collapsed by URL resolution and by routers).
func escapeKey(k string) string {
	return strings.ReplaceAll(url.PathEscape(k), ".", "%2E")
}

// KVFence names the lease lock whose fence a plugin KV write carries: the
// write commits only while Fence is a current holder's fence on
// Domain:Key (else an *Error with code not_holder, and nothing is written).
type KVFence = wire.KVFence

// PutPluginKV writes one key of a plugin's KV. With a fence it needs role
// write and commits only while the fence is current; without one it is an
// operator's override and needs role admin.
func (c *Client) PutPluginKV(ctx context.Context, plugin, key string, value []byte, fence *KVFence) (*PluginKV, error) {
	if value == nil {
		value = []byte{}
	}
	body := wire.PluginKVPutRequest{Value: value, Fence: fence}
	var out PluginKV
	if err := c.Do(ctx, "PUT", pluginKVPath(plugin, key), body, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeletePluginKV deletes one key of a plugin's KV (absent is not an
// error); the roles and the fence are as for PutPluginKV.
func (c *Client) DeletePluginKV(ctx context.Context, plugin, key string, fence *KVFence) error {
	path := pluginKVPath(plugin, key)
	if fence != nil {
		q := url.Values{}
		q.Set("fence_domain", fence.Domain)
		q.Set("fence_key", fence.Key)
		q.Set("fence", strconv.FormatUint(fence.Fence, 10))
		path += "?" + q.Encode()
	}
	return c.Do(ctx, "DELETE", path, nil, nil)
}

func pluginKVPath(plugin, key string) string {
	return "/v1/plugins/" + url.PathEscape(plugin) + "/kv/" + escapeKey(key)
}
