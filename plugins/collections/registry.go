package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// Message types handled by this plugin.
const (
	TypeCreateDatabase   = "CreateDatabase"
	TypeDropDatabase     = "DropDatabase"
	TypeCreateCollection = "CreateCollection"
	TypeDropCollection   = "DropCollection"
	TypeRenameCollection = "RenameCollection"
)

// MessageTypes lists every message type the plugin registers, in a fixed order.
var MessageTypes = []string{
	TypeCreateDatabase, TypeDropDatabase,
	TypeCreateCollection, TypeDropCollection, TypeRenameCollection,
}

// Payloads (JSON). Unknown fields are rejected so that a typo is an error,
// not a silently ignored option. See README.md.
type (
	// CreateDatabaseMsg creates an empty database.
	CreateDatabaseMsg struct {
		Name string `json:"name"`
	}
	// DropDatabaseMsg drops an empty database.
	DropDatabaseMsg struct {
		Name string `json:"name"`
	}
	// CreateCollectionMsg creates a collection in an existing database.
	CreateCollectionMsg struct {
		DB     string `json:"db"`
		Name   string `json:"name"`
		Shards int    `json:"shards,omitempty"` // default 1, at most MaxShards
	}
	// DropCollectionMsg drops an existing collection.
	DropCollectionMsg struct {
		DB   string `json:"db"`
		Name string `json:"name"`
	}
	// RenameCollectionMsg renames a collection, optionally moving it to
	// another existing database (NewDB empty = same database). The id stays.
	RenameCollectionMsg struct {
		DB      string `json:"db"`
		Name    string `json:"name"`
		NewDB   string `json:"new_db,omitempty"`
		NewName string `json:"new_name"`
	}
)

// Records kept in the plugin KV.
type (
	// Database is the record under "db/<name>".
	Database struct {
		ID   uint64 `json:"id"`
		Name string `json:"name"`
	}
	// Collection is the record under "coll/<db>/<name>".
	Collection struct {
		ID     uint64 `json:"id"`
		DB     string `json:"db"`
		Name   string `json:"name"`
		Shards int    `json:"shards"`
	}
)

// Limits.
const (
	MaxNameLen = 255
	MaxShards  = 64
)

// KV layout.
const (
	keySeq      = "seq"   // next id to hand out, decimal
	prefixDB    = "db/"   // db/<db> -> Database
	prefixColl  = "coll/" // coll/<db>/<name> -> Collection
	firstID     = 1
	maxIDDigits = 20
)

func dbKey(db string) string         { return prefixDB + db }
func collKey(db, name string) string { return prefixColl + db + "/" + name }

// Store is the slice of the plugin KV the registry needs. Get reports
// found=false for an absent key. The plugin adapts sdk's KV to it.
type Store interface {
	Get(key string) (value []byte, found bool, err error)
	Put(key string, value []byte) error
	Delete(key string) error
}

// Errors. ErrInvalid and ErrConflict are permanent: retrying the same
// message cannot succeed.
var (
	// ErrInvalid: the payload is malformed (bad JSON, bad name, bad shards).
	ErrInvalid = errors.New("collections: invalid message")
	// ErrConflict: the message does not fit the registry (duplicate name,
	// missing database or collection, non-empty database).
	ErrConflict = errors.New("collections: conflict")
	// ErrCorrupt: a record in the KV cannot be decoded.
	ErrCorrupt = errors.New("collections: corrupt record")
)

// validName accepts 1..MaxNameLen of [A-Za-z0-9_-]: no '/' (the KV key
// separator) and no '.' (the resource-key separator).
func validName(what, s string) error {
	if s == "" {
		return fmt.Errorf("%w: %s is empty", ErrInvalid, what)
	}
	if len(s) > MaxNameLen {
		return fmt.Errorf("%w: %s is longer than %d bytes", ErrInvalid, what, MaxNameLen)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return fmt.Errorf("%w: %s %q: character %q not allowed (use A-Z a-z 0-9 _ -)", ErrInvalid, what, s, c)
		}
	}
	return nil
}

// decode parses a payload strictly into v and validates it.
func decode(payload []byte, v interface{ check() error }) error {
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: payload: %v", ErrInvalid, err)
	}
	if dec.More() {
		return fmt.Errorf("%w: payload: trailing data after the JSON object", ErrInvalid)
	}
	return v.check()
}

func (m *CreateDatabaseMsg) check() error { return validName("database name", m.Name) }
func (m *DropDatabaseMsg) check() error   { return validName("database name", m.Name) }
func (m *CreateCollectionMsg) check() error {
	if err := validName("database name", m.DB); err != nil {
		return err
	}
	if err := validName("collection name", m.Name); err != nil {
		return err
	}
	if m.Shards == 0 {
		m.Shards = 1
	}
	if m.Shards < 1 || m.Shards > MaxShards {
		return fmt.Errorf("%w: shards %d out of range 1..%d", ErrInvalid, m.Shards, MaxShards)
	}
	return nil
}
func (m *DropCollectionMsg) check() error {
	if err := validName("database name", m.DB); err != nil {
		return err
	}
	return validName("collection name", m.Name)
}
func (m *RenameCollectionMsg) check() error {
	if m.NewDB == "" {
		m.NewDB = m.DB
	}
	for _, f := range []struct{ what, v string }{
		{"database name", m.DB}, {"collection name", m.Name},
		{"new database name", m.NewDB}, {"new collection name", m.NewName},
	} {
		if err := validName(f.what, f.v); err != nil {
			return err
		}
	}
	if m.NewDB == m.DB && m.NewName == m.Name {
		return fmt.Errorf("%w: rename %s.%s to itself", ErrInvalid, m.DB, m.Name)
	}
	return nil
}

// Registry applies and validates messages against a Store.
type Registry struct{ S Store }

func getJSON(s Store, key string, v any) (bool, error) {
	b, ok, err := s.Get(key)
	if err != nil || !ok {
		return false, err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return false, fmt.Errorf("%w: %s: %v", ErrCorrupt, key, err)
	}
	return true, nil
}

func putJSON(s Store, key string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return s.Put(key, b)
}

// Database returns the database record, found=false when absent.
func (r Registry) Database(name string) (Database, bool, error) {
	var d Database
	ok, err := getJSON(r.S, dbKey(name), &d)
	return d, ok, err
}

// Collection returns the collection record, found=false when absent.
func (r Registry) Collection(db, name string) (Collection, bool, error) {
	var c Collection
	ok, err := getJSON(r.S, collKey(db, name), &c)
	return c, ok, err
}

func (r Registry) nextID() (uint64, error) {
	b, ok, err := r.S.Get(keySeq)
	if err != nil {
		return 0, err
	}
	id := uint64(firstID)
	if ok {
		if len(b) > maxIDDigits {
			return 0, fmt.Errorf("%w: %s: %d bytes", ErrCorrupt, keySeq, len(b))
		}
		id, err = strconv.ParseUint(string(b), 10, 64)
		if err != nil || id < firstID {
			return 0, fmt.Errorf("%w: %s: %q", ErrCorrupt, keySeq, b)
		}
	}
	return id, r.S.Put(keySeq, strconv.AppendUint(nil, id+1, 10))
}

func (r Registry) needDB(name string, want bool) error {
	_, ok, err := r.Database(name)
	if err != nil {
		return err
	}
	if ok != want {
		if want {
			return fmt.Errorf("%w: database %q does not exist", ErrConflict, name)
		}
		return fmt.Errorf("%w: database %q already exists", ErrConflict, name)
	}
	return nil
}

func (r Registry) needColl(db, name string, want bool) (Collection, error) {
	c, ok, err := r.Collection(db, name)
	if err != nil {
		return c, err
	}
	if ok != want {
		if want {
			return c, fmt.Errorf("%w: collection %s.%s does not exist", ErrConflict, db, name)
		}
		return c, fmt.Errorf("%w: collection %s.%s already exists", ErrConflict, db, name)
	}
	return c, nil
}

// Validate checks that the message of type typ is well-formed and fits the
// current registry, without writing.
func (r Registry) Validate(typ string, payload []byte) error {
	return r.run(typ, payload, false)
}

// Apply validates the message and applies it to the store.
func (r Registry) Apply(typ string, payload []byte) error {
	return r.run(typ, payload, true)
}

func (r Registry) run(typ string, payload []byte, apply bool) error {
	switch typ {
	case TypeCreateDatabase:
		var m CreateDatabaseMsg
		if err := decode(payload, &m); err != nil {
			return err
		}
		if err := r.needDB(m.Name, false); err != nil || !apply {
			return err
		}
		id, err := r.nextID()
		if err != nil {
			return err
		}
		return putJSON(r.S, dbKey(m.Name), Database{ID: id, Name: m.Name})

	case TypeDropDatabase:
		var m DropDatabaseMsg
		if err := decode(payload, &m); err != nil {
			return err
		}
		if err := r.needDB(m.Name, true); err != nil {
			return err
		}
		if err := r.needEmpty(m.Name); err != nil || !apply {
			return err
		}
		return r.S.Delete(dbKey(m.Name))

	case TypeCreateCollection:
		var m CreateCollectionMsg
		if err := decode(payload, &m); err != nil {
			return err
		}
		if err := r.needDB(m.DB, true); err != nil {
			return err
		}
		if _, err := r.needColl(m.DB, m.Name, false); err != nil || !apply {
			return err
		}
		id, err := r.nextID()
		if err != nil {
			return err
		}
		if err := r.bumpCount(m.DB, +1); err != nil {
			return err
		}
		return putJSON(r.S, collKey(m.DB, m.Name), Collection{ID: id, DB: m.DB, Name: m.Name, Shards: m.Shards})

	case TypeDropCollection:
		var m DropCollectionMsg
		if err := decode(payload, &m); err != nil {
			return err
		}
		if _, err := r.needColl(m.DB, m.Name, true); err != nil || !apply {
			return err
		}
		if err := r.bumpCount(m.DB, -1); err != nil {
			return err
		}
		return r.S.Delete(collKey(m.DB, m.Name))

	case TypeRenameCollection:
		var m RenameCollectionMsg
		if err := decode(payload, &m); err != nil {
			return err
		}
		c, err := r.needColl(m.DB, m.Name, true)
		if err != nil {
			return err
		}
		if err := r.needDB(m.NewDB, true); err != nil {
			return err
		}
		if _, err := r.needColl(m.NewDB, m.NewName, false); err != nil || !apply {
			return err
		}
		if m.NewDB != m.DB {
			if err := r.bumpCount(m.DB, -1); err != nil {
				return err
			}
			if err := r.bumpCount(m.NewDB, +1); err != nil {
				return err
			}
		}
		if err := r.S.Delete(collKey(m.DB, m.Name)); err != nil {
			return err
		}
		c.DB, c.Name = m.NewDB, m.NewName
		return putJSON(r.S, collKey(c.DB, c.Name), c)
	}
	return fmt.Errorf("%w: unknown message type %q", ErrInvalid, typ)
}

// The number of collections per database is kept under "count/<db>" so that
// DropDatabase can check emptiness without a scan.
const prefixCount = "count/"

func (r Registry) count(db string) (int64, error) {
	b, ok, err := r.S.Get(prefixCount + db)
	if err != nil || !ok {
		return 0, err
	}
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%w: %s%s: %q", ErrCorrupt, prefixCount, db, b)
	}
	return n, nil
}

func (r Registry) bumpCount(db string, d int64) error {
	n, err := r.count(db)
	if err != nil {
		return err
	}
	n += d
	if n <= 0 {
		return r.S.Delete(prefixCount + db)
	}
	return r.S.Put(prefixCount+db, strconv.AppendInt(nil, n, 10))
}

func (r Registry) needEmpty(db string) error {
	n, err := r.count(db)
	if err != nil {
		return err
	}
	if n > 0 {
		return fmt.Errorf("%w: database %q still has %d collection(s)", ErrConflict, db, n)
	}
	return nil
}
