// Command collections is a first-party hostd plugin: a registry of
// databases and collections kept in the plugin's KV, maintained by ack
// callbacks of CreateDatabase, DropDatabase, CreateCollection,
// DropCollection and RenameCollection broadcasts. Validators reject a
// message that does not fit the registry before it is persisted, and
// resource-key functions make conflicting messages wait for each other.
// Payloads and the KV layout are documented in README.md.
//
// Build: hostd plugin build plugins/collections (or make plugins).
package main

import (
	"errors"
	"strconv"

	"github.com/hostd-dev/hostd/sdk"
	"github.com/hostd-dev/hostd/sdk/abi"
)

func init() {
	for _, typ := range MessageTypes {
		sdk.OnValidate(typ, validate)
		sdk.OnAck(typ, ack)
		sdk.ResourceKeys(typ, resourceKeys)
	}
}

// kvStore adapts the SDK's KV to Store.
type kvStore struct{}

func (kvStore) Get(key string) ([]byte, bool, error) { return sdk.KVGet(key) }
func (kvStore) Put(key string, value []byte) error   { return sdk.KVPut(key, value) }
func (kvStore) Delete(key string) error              { return sdk.KVDelete(key) }

// classify marks errors that cannot go away on retry as permanent.
func classify(err error) error {
	if errors.Is(err, ErrInvalid) || errors.Is(err, ErrConflict) || errors.Is(err, ErrCorrupt) {
		return sdk.Permanent(err)
	}
	return err
}

func validate(m sdk.Message) error {
	return classify(Registry{kvStore{}}.Validate(m.Type, m.Payload))
}

func ack(m sdk.Message) error {
	if err := (Registry{kvStore{}}).Apply(m.Type, m.Payload); err != nil {
		sdk.Warn("collections: message rejected", "type", m.Type, "broadcast", m.ID, "error", err.Error())
		return classify(err)
	}
	sdk.Info("collections: applied", "type", m.Type, "broadcast", m.ID)
	sdk.SpanEvent("collections.applied", "type", m.Type, "broadcast", strconv.FormatUint(m.ID, 10))
	return nil
}

func resourceKeys(m sdk.Message) ([]abi.ResourceKey, error) {
	keys, err := ResourceKeys(m.Type, m.Payload)
	return keys, classify(err)
}

func main() {}
