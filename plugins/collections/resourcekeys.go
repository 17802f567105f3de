package main

import (
	"fmt"

	"github.com/hostd-dev/hostd/sdk/abi"
)

func dbRes(db string, mode abi.LockMode) abi.ResourceKey {
	return abi.ResourceKey{Domain: abi.DomainDatabase, Key: db, Mode: mode}
}

func collRes(db, name string, mode abi.LockMode) abi.ResourceKey {
	return abi.ResourceKey{Domain: abi.DomainCollection, Key: db + "." + name, Mode: mode}
}

// ResourceKeys returns the resource keys a message of type typ locks:
// a database-level message takes its database exclusively; a
// collection-level message takes its collection(s) exclusively and their
// database(s) shared, so that collection changes in one database run in
// parallel while a DropDatabase waits for all of them.
func ResourceKeys(typ string, payload []byte) ([]abi.ResourceKey, error) {
	switch typ {
	case TypeCreateDatabase:
		var m CreateDatabaseMsg
		if err := decode(payload, &m); err != nil {
			return nil, err
		}
		return []abi.ResourceKey{dbRes(m.Name, abi.Exclusive)}, nil
	case TypeDropDatabase:
		var m DropDatabaseMsg
		if err := decode(payload, &m); err != nil {
			return nil, err
		}
		return []abi.ResourceKey{dbRes(m.Name, abi.Exclusive)}, nil
	case TypeCreateCollection:
		var m CreateCollectionMsg
		if err := decode(payload, &m); err != nil {
			return nil, err
		}
		return []abi.ResourceKey{dbRes(m.DB, abi.Shared), collRes(m.DB, m.Name, abi.Exclusive)}, nil
	case TypeDropCollection:
		var m DropCollectionMsg
		if err := decode(payload, &m); err != nil {
			return nil, err
		}
		return []abi.ResourceKey{dbRes(m.DB, abi.Shared), collRes(m.DB, m.Name, abi.Exclusive)}, nil
	case TypeRenameCollection:
		var m RenameCollectionMsg
		if err := decode(payload, &m); err != nil {
			return nil, err
		}
		keys := []abi.ResourceKey{dbRes(m.DB, abi.Shared)}
		if m.NewDB != m.DB {
			keys = append(keys, dbRes(m.NewDB, abi.Shared))
		}
		return append(keys, collRes(m.DB, m.Name, abi.Exclusive), collRes(m.NewDB, m.NewName, abi.Exclusive)), nil
	}
	return nil, fmt.Errorf("%w: unknown message type %q", ErrInvalid, typ)
}
