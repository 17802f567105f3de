package wasm

import (
	"errors"
	"fmt"
)

// Tables count against a plugin's memory budget (issue 12: with a 1 MiB
// memory_limit, table.grow of 4M elements grew hostd's heap by hundreds of
// MiB, outside the limit wazero enforces on linear memory). wazero keeps a
// table as a slice of 8-byte references.
const (
	// tableElemBytes is what one table element costs in hostd's heap.
	tableElemBytes = 8
	// tableShare is the part of memory_limit all of a module's tables may
	// use together: memory_limit / tableShare bytes.
	tableShare = 4
)

// errTables wraps every reason boundTables refuses a module.
var errTables = errors.New("tables exceed the plugin's memory budget")

// tableBudget is the most table elements a plugin with memory limit
// memoryLimit may have, across all its tables.
func tableBudget(memoryLimit uint64) uint64 {
	return memoryLimit / tableShare / tableElemBytes
}

// boundTables rewrites the table section of a validated module so that
// its tables together can never hold more than budget elements: each
// table gets a declared maximum (table.grow beyond it fails, returning -1,
// as the spec allows), and the maxima add up to at most budget. The first
// table with room gets the slack first. It refuses (an error wrapping
// errTables) a module whose tables' minimum sizes add up to more than
// budget, and a module that imports a table (its size would be someone
// else's). Nothing else changes. It never panics, whatever the input.
func boundTables(bin []byte, budget uint64) ([]byte, error) {
	const header = "\x00asm\x01\x00\x00\x00"
	if len(bin) < 8 || string(bin[:8]) != header {
		return nil, fmt.Errorf("%w: not a WebAssembly 1.0 binary", errInstrument)
	}
	r := &reader{b: bin, pos: 8}
	type table struct {
		ref      byte
		min, max uint64
		hasMax   bool
	}
	var tables []table
	tableAt, tableEnd := -1, -1 // the table section, header included
	for r.pos < len(r.b) {
		start := r.pos
		id, err := r.byte()
		if err != nil {
			return nil, err
		}
		n, err := r.u32()
		if err != nil {
			return nil, err
		}
		body, err := r.bytes(int(n))
		if err != nil {
			return nil, err
		}
		sr := &reader{b: body}
		switch id {
		case 2:
			if err := noTableImports(sr); err != nil {
				return nil, err
			}
		case 4:
			if tableAt >= 0 {
				return nil, fmt.Errorf("%w: duplicate table section", errInstrument)
			}
			tableAt, tableEnd = start, r.pos
			count, err := sr.u32()
			if err != nil {
				return nil, err
			}
			for i := uint32(0); i < count; i++ {
				var t table
				if t.ref, err = sr.refType(); err != nil {
					return nil, err
				}
				flags, err := sr.byte()
				if err != nil {
					return nil, err
				}
				if flags > 1 {
					return nil, fmt.Errorf("%w: table %d: unsupported limits flags %#x", errTables, i, flags)
				}
				if t.min, err = sr.uleb(64); err != nil {
					return nil, err
				}
				if t.hasMax = flags == 1; t.hasMax {
					if t.max, err = sr.uleb(64); err != nil {
						return nil, err
					}
					if t.max < t.min {
						return nil, fmt.Errorf("%w: table %d: maximum %d below minimum %d", errTables, i, t.max, t.min)
					}
				}
				tables = append(tables, t)
			}
			if sr.pos != len(body) {
				return nil, fmt.Errorf("%w: %d bytes after the last table", errInstrument, len(body)-sr.pos)
			}
		}
	}
	if tableAt < 0 {
		return bin, nil
	}
	var mins uint64
	for _, t := range tables {
		if t.min > budget || mins+t.min > budget {
			mins = budget + 1
			break
		}
		mins += t.min
	}
	if mins > budget {
		return nil, fmt.Errorf("%w: the tables' minimum sizes exceed the budget of %d elements (memory_limit/%d at %d bytes an element)",
			errTables, budget, tableShare, tableElemBytes)
	}
	slack := budget - mins
	body := appendU32(nil, uint32(len(tables)))
	for _, t := range tables {
		extra := slack
		if t.hasMax {
			extra = min(extra, t.max-t.min)
		}
		slack -= extra
		body = append(body, t.ref, 0x01)
		body = appendU32(body, uint32(t.min))
		body = appendU32(body, uint32(t.min+extra))
	}
	out := make([]byte, 0, len(bin)+16)
	out = append(out, bin[:tableAt]...)
	out = append(out, 4)
	out = appendU32(out, uint32(len(body)))
	out = append(out, body...)
	return append(out, bin[tableEnd:]...), nil
}

// noTableImports fails if the import section imports a table.
func noTableImports(r *reader) error {
	n, err := r.u32()
	if err != nil {
		return err
	}
	for i := uint32(0); i < n; i++ {
		var names [2][]byte
		for j := range names {
			l, err := r.u32()
			if err != nil {
				return err
			}
			if names[j], err = r.bytes(int(l)); err != nil {
				return err
			}
		}
		kind, err := r.byte()
		if err != nil {
			return err
		}
		switch kind {
		case 0x00:
			_, err = r.u32()
		case 0x01:
			return fmt.Errorf("%w: imports table %s.%s (a plugin must define its own tables)", errTables, names[0], names[1])
		case 0x02:
			err = r.limits()
		case 0x03:
			if _, err = r.valType(); err == nil {
				_, err = r.byte()
			}
		default:
			return fmt.Errorf("%w: unsupported import kind %#x", errInstrument, kind)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
