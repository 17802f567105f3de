package main

import "github.com/hostd-dev/hostd/sdk/abi"

// step is one message of a scripted sequence and what the plugin must
// answer: the validator's code, the ack callback's code (the ack runs even
// when the validator rejects, to check the callback defends itself too).
type step struct {
	typ      string
	payload  string
	validate abi.Code
	ack      abi.Code
}

const (
	ok   = abi.CodeOK
	perm = abi.CodePermanent
)

// sequence exercises every message type, every rejection and the id
// sequence. It is run by sdktest (TestSequence) and, in the same test, by
// the Wasm build through runtime/wasm (TestWasmMatchesSDKTest).
var sequence = []step{
	{TypeCreateCollection, `{"db":"shop","name":"orders"}`, perm, perm}, // no database yet
	{TypeCreateDatabase, `{"name":"shop"}`, ok, ok},
	{TypeCreateDatabase, `{"name":"shop"}`, perm, perm}, // duplicate
	{TypeCreateDatabase, `{"name":"bad/name"}`, perm, perm},
	{TypeCreateDatabase, `{"name":"x","extra":1}`, perm, perm},
	{TypeCreateDatabase, `not json`, perm, perm},
	{TypeCreateCollection, `{"db":"shop","name":"orders","shards":4}`, ok, ok},
	{TypeCreateCollection, `{"db":"shop","name":"orders"}`, perm, perm}, // duplicate
	{TypeCreateCollection, `{"db":"shop","name":"users"}`, ok, ok},
	{TypeCreateCollection, `{"db":"shop","name":"big","shards":65}`, perm, perm},
	{TypeDropCollection, `{"db":"shop","name":"ghost"}`, perm, perm}, // does not exist
	{TypeRenameCollection, `{"db":"shop","name":"ghost","new_name":"g2"}`, perm, perm},
	{TypeRenameCollection, `{"db":"shop","name":"users","new_name":"orders"}`, perm, perm}, // target exists
	{TypeRenameCollection, `{"db":"shop","name":"users","new_name":"customers"}`, ok, ok},
	{TypeCreateDatabase, `{"name":"archive"}`, ok, ok},
	{TypeRenameCollection, `{"db":"shop","name":"orders","new_db":"nowhere","new_name":"o"}`, perm, perm},
	{TypeRenameCollection, `{"db":"shop","name":"orders","new_db":"archive","new_name":"orders_2025"}`, ok, ok},
	{TypeDropDatabase, `{"name":"shop"}`, perm, perm}, // still has customers
	{TypeDropCollection, `{"db":"shop","name":"customers"}`, ok, ok},
	{TypeDropCollection, `{"db":"shop","name":"customers"}`, perm, perm}, // already dropped
	{TypeDropDatabase, `{"name":"shop"}`, ok, ok},
	{TypeCreateDatabase, `{"name":"shop"}`, ok, ok}, // re-created with a new id
	{TypeCreateCollection, `{"db":"shop","name":"orders"}`, ok, ok},
}

// wantFinal is the KV after the sequence.
var wantFinal = map[string]string{
	"seq":                      "7",
	"db/archive":               `{"id":4,"name":"archive"}`,
	"db/shop":                  `{"id":5,"name":"shop"}`,
	"coll/archive/orders_2025": `{"id":2,"db":"archive","name":"orders_2025","shards":4}`,
	"coll/shop/orders":         `{"id":6,"db":"shop","name":"orders","shards":1}`,
	"count/archive":            "1",
	"count/shop":               "1",
}
