package wasm

import (
	"errors"
	"fmt"
	"strings"
)

// InterruptExport is the reserved export name of the interrupt flag that
// hostd adds to a plugin module when it loads it (see instrument). A plugin
// must not export anything under this name.
const InterruptExport = "__hostd_interrupt"

// StartExport is the reserved export name under which hostd exports a
// module's start function after removing its start section (see
// instrument), so that it runs under the call watchdog like _initialize.
const StartExport = "__hostd_start"

// The interrupt counter (see instrument). The guest decrements it at every
// check; at zero it exits to Go once and starts again from budget. The host
// writes stopValue to stop it.
const (
	budget    = 1 << 16  // checks between two exits to Go
	stopValue = -1 << 30 // written by the host: trap at the next check
	stopBelow = -1 << 29 // the guest traps when the counter is below this
)

// errInstrument wraps every reason the rewriter gives up on a module; the
// module is then run unmodified with wazero's close-on-context-done.
var errInstrument = errors.New("cannot instrument module")

// instrumentation is the result of rewriting a module.
type instrumentation struct {
	bin []byte
	// global is the index of the added counter global.
	global uint32
	// start: the module had a start section, now exported as StartExport
	// (the host calls it first, under the watchdog).
	start bool
}

// instrument rewrites a WebAssembly binary so a call can be interrupted
// without wazero's per-loop-iteration exit to Go. The input must be a
// module wazero has already validated (compile validates): the rewriter
// relies on it, and checks on its own that every local and global index
// the code names is below the function's locals and the module's globals,
// so the state it adds is out of reach of guest code by construction.
//
// It appends one mutable i32 global, the interrupt counter (after the
// defined globals, so no index moves), exports it as InterruptExport, and
// inserts at the start of every function body (counterCheck), with w the
// body's weight (1 per 64 bytes of code, at least 1):
//
//	global.get $c  i32.const w  i32.sub  global.set $c
//	global.get $c  i32.const 0  i32.le_s
//	if
//	  global.get $c  i32.const stopBelow  i32.lt_s
//	  if unreachable end          ;; the host wrote stopValue: trap
//	  i32.const budget  global.set $c
//	  i32.const 0  memory.grow 0  drop
//	end
//
// at the start of every loop body (loopCheck), counting in one added local
// $n by the loop body's weight w:
//
//	local.get $n  i32.const w  i32.add  local.tee $n
//	i32.const loopLimit  i32.ge_u
//	if
//	  i32.const 0  local.set $n
//	  global.get $c  i32.const stopBelow  i32.lt_s
//	  if unreachable end
//	  i32.const 0  memory.grow 0  drop
//	end
//
// and before every bulk instruction whose cost grows with its length
// operand (memory.init/copy/fill, table.init/copy/fill; bulkCharge), which
// it charges to the counter (1 per 4 KiB or 512 table elements) through a
// second added local $t:
//
//	local.tee $t  global.get $c  local.get $t  i32.const shift  i32.shr_u
//	i32.sub  global.set $c  <the entry check's test, from global.get $c on>
//
// The memory.grow by 0 pages is an exit from compiled code to Go: compiled
// guest code cannot be preempted by the Go scheduler, and without such
// exits a garbage collection's stop-the-world (which also stops the
// goroutine that would write the stop) would wait for the guest forever.
// The weights bound the work between two exits by code size, not by a
// count a guest could make arbitrarily expensive: at most budget weight
// units of function entries (budget × 64 bytes of straight-line code), or
// loopLimit units of one invocation's loop iterations, or budget × 4 KiB
// of bulk memory work. The checks are stack-neutral, so they are valid at
// any loop header whatever its block type. No imports or functions are
// added, so every function, type, table, memory and global index stays as
// it was; the added locals come after the function's own.
//
// A start section is removed and its function exported as StartExport:
// wazero would run it inside instantiation, before the watchdog can reach
// the counter; the host calls it right after instantiation instead, under
// the init timeout (same order: after data and element segments, before
// any export is called).
//
// instrument walks every instruction of every body and knows the
// immediates of the MVP, multi-value block types, sign extension, the
// 0xFC prefix (saturating truncation, bulk memory, table operations),
// reference types and tail calls. It returns an error wrapping
// errInstrument for anything else (SIMD, threads, exception handling,
// typed function references, a module without a memory, a module that
// already exports InterruptExport or StartExport, or a malformed module);
// the caller refuses the module unless the operator chose
// close-on-context-done for it. It never panics, whatever the input.
// DWARF custom sections (".debug_*") are dropped: their code offsets would
// be wrong.
func instrument(bin []byte) (*instrumentation, error) {
	const header = "\x00asm\x01\x00\x00\x00"
	if len(bin) < 8 || string(bin[:8]) != header {
		return nil, fmt.Errorf("%w: not a WebAssembly 1.0 binary", errInstrument)
	}
	type section struct {
		id   byte
		body []byte
	}
	var secs []section
	r := &reader{b: bin, pos: 8}
	for r.pos < len(r.b) {
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
		secs = append(secs, section{id, body})
	}

	var (
		importedGlobals, definedGlobals uint32
		memories                        uint32
		definedFuncs                    = -1
		exportsAt, globalsAt, codeAt    = -1, -1, -1
		startAt                         = -1
		startFunc                       uint32
	)
	var typeParams []uint32 // by type index
	var funcTypes []uint32  // by defined function
	seen := map[byte]bool{}
	for i, s := range secs {
		if s.id != 0 {
			if seen[s.id] {
				return nil, fmt.Errorf("%w: duplicate section %d", errInstrument, s.id)
			}
			seen[s.id] = true
		}
		sr := &reader{b: s.body}
		switch s.id {
		case 0, 4, 9, 11, 12: // custom, table, element, data, data count: unchanged
		case 1:
			var err error
			if typeParams, err = paramCounts(sr); err != nil {
				return nil, err
			}
		case 2:
			g, m, err := countImports(sr)
			if err != nil {
				return nil, err
			}
			importedGlobals, memories = g, memories+m
		case 3:
			n, err := sr.u32()
			if err != nil {
				return nil, err
			}
			definedFuncs = int(n)
			for j := uint32(0); j < n; j++ {
				t, err := sr.u32()
				if err != nil {
					return nil, err
				}
				funcTypes = append(funcTypes, t)
			}
		case 5:
			n, err := sr.u32()
			if err != nil {
				return nil, err
			}
			memories += n
		case 6:
			n, err := sr.u32()
			if err != nil {
				return nil, err
			}
			definedGlobals, globalsAt = n, i
		case 7:
			exportsAt = i
			if err := checkExports(sr); err != nil {
				return nil, err
			}
		case 8:
			var err error
			if startFunc, err = sr.u32(); err != nil {
				return nil, err
			}
			startAt = i
		case 10:
			codeAt = i
		default:
			return nil, fmt.Errorf("%w: unsupported section id %d", errInstrument, s.id)
		}
	}
	if importedGlobals+definedGlobals >= 1<<31 {
		return nil, fmt.Errorf("%w: too many globals", errInstrument)
	}
	if memories == 0 {
		return nil, fmt.Errorf("%w: the module has no memory (the check exits to Go through memory.grow)", errInstrument)
	}
	out := &instrumentation{global: importedGlobals + definedGlobals, start: startAt >= 0}

	var code []byte
	if codeAt >= 0 {
		var err error
		params := make([]uint32, len(funcTypes))
		for i, t := range funcTypes {
			if int(t) >= len(typeParams) {
				return nil, fmt.Errorf("%w: function %d has type %d, out of range", errInstrument, i, t)
			}
			params[i] = typeParams[t]
		}
		code, err = instrumentCode(secs[codeAt].body, out.global, params)
		if err != nil {
			return nil, err
		}
	}
	if n := countOf(code); definedFuncs >= 0 && n != definedFuncs || definedFuncs < 0 && n > 0 {
		return nil, fmt.Errorf("%w: %d function declarations but %d bodies", errInstrument, max(definedFuncs, 0), n)
	}

	// The new global: mutable i32 starting at budget.
	newGlobal := append(appendS32([]byte{0x7f, 0x01, 0x41}, budget), 0x0b)
	var globals []byte
	if globalsAt >= 0 {
		sr := &reader{b: secs[globalsAt].body}
		_, _ = sr.u32() // parsed above
		globals = appendU32(nil, definedGlobals+1)
		globals = append(globals, secs[globalsAt].body[sr.pos:]...)
		globals = append(globals, newGlobal...)
	} else {
		globals = append(appendU32(nil, 1), newGlobal...)
	}
	newExport := appendName(nil, InterruptExport)
	newExport = append(newExport, 0x03) // global
	newExport = appendU32(newExport, out.global)
	added := uint32(1)
	if out.start {
		newExport = appendName(newExport, StartExport)
		newExport = append(newExport, 0x00) // func
		newExport = appendU32(newExport, startFunc)
		added++
	}
	var exports []byte
	if exportsAt >= 0 {
		sr := &reader{b: secs[exportsAt].body}
		n, _ := sr.u32()
		exports = appendU32(nil, n+added)
		exports = append(exports, secs[exportsAt].body[sr.pos:]...)
		exports = append(exports, newExport...)
	} else {
		exports = append(appendU32(nil, added), newExport...)
	}

	res := make([]byte, 0, len(bin)+len(bin)/8+64)
	res = append(res, header...)
	emit := func(id byte, body []byte) {
		res = append(res, id)
		res = appendU32(res, uint32(len(body)))
		res = append(res, body...)
	}
	globalsDone, exportsDone := false, false
	// Place new sections in the spec's order: after memory (5) and tag
	// (13), global (6) then export (7), before start/element/data
	// count/code/data.
	flush := func(rank int) {
		if !globalsDone && rank > sectionRank(6) {
			emit(6, globals)
			globalsDone = true
		}
		if !exportsDone && rank > sectionRank(7) {
			emit(7, exports)
			exportsDone = true
		}
	}
	for i, s := range secs {
		switch {
		case s.id == 0:
			if isDebugSection(s.body) {
				continue
			}
			emit(0, s.body)
		case i == globalsAt:
			emit(6, globals)
			globalsDone = true
		case i == exportsAt:
			flush(sectionRank(7)) // a new global section goes before exports
			emit(7, exports)
			exportsDone = true
		case i == codeAt:
			flush(sectionRank(10))
			emit(10, code)
		case i == startAt:
			flush(sectionRank(8)) // dropped: exported as StartExport
		default:
			flush(sectionRank(s.id))
			emit(s.id, s.body)
		}
	}
	flush(1 << 30)
	out.bin = res
	return out, nil
}

// sectionRank is a known section's position in the order the spec requires.
func sectionRank(id byte) int {
	switch id {
	case 1, 2, 3, 4, 5:
		return int(id)
	case 13: // tag
		return 6
	case 6, 7, 8, 9:
		return int(id) + 1
	case 12: // data count
		return 11
	case 10:
		return 12
	case 11:
		return 13
	}
	return 0
}

func isDebugSection(body []byte) bool {
	r := &reader{b: body}
	n, err := r.u32()
	if err != nil {
		return false
	}
	name, err := r.bytes(int(n))
	return err == nil && strings.HasPrefix(string(name), ".debug_")
}

func countOf(code []byte) int {
	if code == nil {
		return 0
	}
	n, _ := (&reader{b: code}).u32()
	return int(n)
}

// Weights (see instrument).
const (
	// weightBytes is how many bytes of code count as one unit of weight.
	weightBytes = 64
	// loopLimit is how much loop weight one function invocation runs
	// between two looks at the counter (a stop check and an exit to Go).
	loopLimit = 1 << 14
	// memoryShift and tableShift: a bulk instruction's length operand is
	// charged length>>shift units (4 KiB of memory, 512 table elements of
	// 8 bytes).
	memoryShift = 12
	tableShift  = 9
)

// weight is the weight of n bytes of code, between 1 and limit.
func weight(n int, limit int32) int32 {
	return int32(min(1+n/weightBytes, int(limit)))
}

// counterCheck returns the instructions inserted at a function entry (see
// instrument): charge w to the counter, then test it.
func counterCheck(global uint32, w int32) []byte {
	b := appendU32([]byte{0x23}, global)   // global.get
	b = appendS32(append(b, 0x41), w)      // i32.const w
	b = append(b, 0x6b)                    // i32.sub
	b = appendU32(append(b, 0x24), global) // global.set
	return append(b, counterTest(global)...)
}

// counterTest: if the counter ran out, trap when the host wrote
// stopValue, else start it again from budget and exit to Go once.
func counterTest(global uint32) []byte {
	get := appendU32([]byte{0x23}, global)
	set := appendU32([]byte{0x24}, global)
	var b []byte
	b = append(b, get...)
	b = append(b, 0x41, 0x00, 0x4c, 0x04, 0x40) // i32.const 0; i32.le_s; if
	b = append(b, get...)
	b = appendS32(append(b, 0x41), stopBelow)
	b = append(b, 0x48, 0x04, 0x40, 0x00, 0x0b) // i32.lt_s; if unreachable end
	b = appendS32(append(b, 0x41), budget)
	b = append(b, set...)
	b = append(b, 0x41, 0x00, 0x40, 0x00, 0x1a) // i32.const 0; memory.grow 0; drop
	return append(b, 0x0b)                      // end
}

// loopCheck returns the instructions inserted at a loop header: add the
// loop body's weight w to a local (a register, where the entry check's
// global costs a store and a load); once it reaches loopLimit, reset it,
// trap if the host wrote stopValue, else exit to Go once (memory.grow 0).
func loopCheck(global, local uint32, w int32) []byte {
	var b []byte
	b = appendU32(append(b, 0x20), local) // local.get
	b = appendS32(append(b, 0x41), w)     // i32.const w
	b = append(b, 0x6a)                   // i32.add
	b = appendU32(append(b, 0x22), local) // local.tee
	b = appendS32(append(b, 0x41), loopLimit)
	b = append(b, 0x4f, 0x04, 0x40)        // i32.ge_u; if
	b = append(b, 0x41, 0x00)              // i32.const 0
	b = appendU32(append(b, 0x21), local)  // local.set
	b = appendU32(append(b, 0x23), global) // global.get
	b = appendS32(append(b, 0x41), stopBelow)
	b = append(b, 0x48, 0x04, 0x40, 0x00, 0x0b) // i32.lt_s; if unreachable end
	b = append(b, 0x41, 0x00, 0x40, 0x00, 0x1a) // i32.const 0; memory.grow 0; drop
	return append(b, 0x0b)                      // end
}

// bulkCharge returns the instructions inserted before a bulk instruction
// whose length operand (an i32, on top of the stack) is charged to the
// counter, length>>shift units, through the local tmp.
func bulkCharge(global, tmp uint32, shift byte) []byte {
	var b []byte
	b = appendU32(append(b, 0x22), tmp)    // local.tee $t (the length stays)
	b = appendU32(append(b, 0x23), global) // global.get
	b = appendU32(append(b, 0x20), tmp)    // local.get $t
	b = append(b, 0x41, shift, 0x76, 0x6b) // i32.const shift; i32.shr_u; i32.sub
	b = appendU32(append(b, 0x24), global) // global.set
	return append(b, counterTest(global)...)
}

// countImports returns the number of imported globals and memories.
func countImports(r *reader) (globals, memories uint32, err error) {
	n, err := r.u32()
	if err != nil {
		return 0, 0, err
	}
	for i := uint32(0); i < n; i++ {
		for j := 0; j < 2; j++ { // module, name
			l, err := r.u32()
			if err != nil {
				return 0, 0, err
			}
			if _, err := r.bytes(int(l)); err != nil {
				return 0, 0, err
			}
		}
		kind, err := r.byte()
		if err != nil {
			return 0, 0, err
		}
		switch kind {
		case 0x00: // func: type index
			_, err = r.u32()
		case 0x01: // table: reftype, limits
			if _, err = r.refType(); err == nil {
				err = r.limits()
			}
		case 0x02: // memory: limits
			memories++
			err = r.limits()
		case 0x03: // global: valtype, mutability
			globals++
			if _, err = r.valType(); err == nil {
				_, err = r.byte()
			}
		default:
			return 0, 0, fmt.Errorf("%w: unsupported import kind %#x", errInstrument, kind)
		}
		if err != nil {
			return 0, 0, err
		}
	}
	return globals, memories, nil
}

// checkExports fails if the module already exports InterruptExport.
func checkExports(r *reader) error {
	n, err := r.u32()
	if err != nil {
		return err
	}
	for i := uint32(0); i < n; i++ {
		l, err := r.u32()
		if err != nil {
			return err
		}
		name, err := r.bytes(int(l))
		if err != nil {
			return err
		}
		if string(name) == InterruptExport || string(name) == StartExport {
			return fmt.Errorf("%w: the module already exports %s (a name reserved by hostd)", errInstrument, name)
		}
		if _, err := r.byte(); err != nil {
			return err
		}
		if _, err := r.u32(); err != nil {
			return err
		}
	}
	return nil
}

// paramCounts reads the type section: the parameter count of each type.
func paramCounts(r *reader) ([]uint32, error) {
	n, err := r.u32()
	if err != nil {
		return nil, err
	}
	var out []uint32
	for i := uint32(0); i < n; i++ {
		if form, err := r.byte(); err != nil {
			return nil, err
		} else if form != 0x60 {
			return nil, fmt.Errorf("%w: unsupported type form %#x", errInstrument, form)
		}
		var params uint32
		for j := 0; j < 2; j++ { // params, results
			k, err := r.u32()
			if err != nil {
				return nil, err
			}
			for l := uint32(0); l < k; l++ {
				if _, err := r.valType(); err != nil {
					return nil, err
				}
			}
			if j == 0 {
				params = k
			}
		}
		out = append(out, params)
	}
	return out, nil
}

// instrumentCode rewrites the code section's bodies. globals is the
// number of globals the original module has (imported and defined).
func instrumentCode(sec []byte, globals uint32, params []uint32) ([]byte, error) {
	r := &reader{b: sec}
	n, err := r.u32()
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(sec)+len(sec)/8)
	out = appendU32(out, n)
	var body []byte
	for i := uint32(0); i < n; i++ {
		size, err := r.u32()
		if err != nil {
			return nil, err
		}
		b, err := r.bytes(int(size))
		if err != nil {
			return nil, err
		}
		if int(i) >= len(params) {
			return nil, fmt.Errorf("%w: more function bodies than declarations", errInstrument)
		}
		body, err = instrumentBody(body[:0], b, globals, params[i])
		if err != nil {
			return nil, fmt.Errorf("function body %d: %w", i, err)
		}
		out = appendU32(out, uint32(len(body)))
		out = append(out, body...)
	}
	if r.pos != len(sec) {
		return nil, fmt.Errorf("%w: %d bytes after the last function body", errInstrument, len(sec)-r.pos)
	}
	return out, nil
}

// Events of walkBody.
const (
	evLoop    = iota // a loop's body starts at at
	evLoopEnd        // the end instruction of a loop is at at
	evBulk           // a bulk instruction (its 0xfc prefix) is at at; shift
	evEnd            // the function's end instruction is at at
)

// walkBody walks the instructions of a function body from pos (after the
// locals) to the function's end, calling visit for loops, bulk
// instructions and the end. It fails if a local index is not below locals
// or a global index not below globals: after the rewrite, those indices
// would name the state hostd adds.
func walkBody(b []byte, pos int, locals uint64, globals uint32, visit func(ev, at int, shift byte)) error {
	r := &reader{b: b, pos: pos}
	var blocks []bool // open blocks: true for a loop
	for {
		if r.pos >= len(b) {
			return fmt.Errorf("%w: body ends without end", errInstrument)
		}
		at := r.pos
		op, _ := r.byte()
		switch op {
		case 0x02, 0x03, 0x04: // block, loop, if
			if err := r.blockType(); err != nil {
				return err
			}
			blocks = append(blocks, op == 0x03)
			if op == 0x03 {
				visit(evLoop, r.pos, 0)
			}
		case 0x0b: // end
			if len(blocks) == 0 {
				if r.pos != len(b) {
					return fmt.Errorf("%w: %d bytes after the function's end", errInstrument, len(b)-r.pos)
				}
				visit(evEnd, at, 0)
				return nil
			}
			if blocks[len(blocks)-1] {
				visit(evLoopEnd, at, 0)
			}
			blocks = blocks[:len(blocks)-1]
		case 0x20, 0x21, 0x22: // local.get/set/tee
			x, err := r.u32()
			if err != nil {
				return err
			}
			if uint64(x) >= locals {
				return fmt.Errorf("%w: local %d out of range (the function has %d)", errInstrument, x, locals)
			}
		case 0x23, 0x24: // global.get/set
			x, err := r.u32()
			if err != nil {
				return err
			}
			if x >= globals {
				return fmt.Errorf("%w: global %d out of range (the module has %d)", errInstrument, x, globals)
			}
		case 0xfc:
			sub := &reader{b: b, pos: r.pos}
			n, err := sub.u32()
			if err != nil {
				return err
			}
			switch n {
			case 8, 10, 11: // memory.init, memory.copy, memory.fill
				visit(evBulk, at, memoryShift)
			case 12, 14, 17: // table.init, table.copy, table.fill
				visit(evBulk, at, tableShift)
			}
			if err := r.immediates(op); err != nil {
				return err
			}
		default:
			if err := r.immediates(op); err != nil {
				return err
			}
		}
	}
}

// instrumentBody appends the instrumented body b to out: the entry check,
// two more i32 locals (the loop counter and the bulk length) and the loop
// and bulk checks.
func instrumentBody(out, b []byte, globals, params uint32) ([]byte, error) {
	r := &reader{b: b}
	groups, err := r.u32()
	if err != nil {
		return nil, err
	}
	start := r.pos
	locals := uint64(params)
	for j := uint32(0); j < groups; j++ {
		n, err := r.u32()
		if err != nil {
			return nil, err
		}
		locals += uint64(n)
		if _, err := r.valType(); err != nil {
			return nil, err
		}
	}
	if locals >= 50000 { // wazero's limit is higher; keep far from any
		return nil, fmt.Errorf("%w: %d locals", errInstrument, locals)
	}
	codeAt := r.pos
	// First pass: check indices, measure every loop's body.
	var loops, open []int // loops: body size by loop ordinal; open: ordinals
	var starts []int
	err = walkBody(b, codeAt, locals, globals, func(ev, at int, _ byte) {
		switch ev {
		case evLoop:
			open = append(open, len(loops))
			starts = append(starts, at)
			loops = append(loops, 0)
		case evLoopEnd:
			k := open[len(open)-1]
			loops[k] = at - starts[len(starts)-1]
			open, starts = open[:len(open)-1], starts[:len(starts)-1]
		}
	})
	if err != nil {
		return nil, err
	}
	counter, tmp := uint32(locals), uint32(locals)+1
	out = appendU32(out, groups+1)
	out = append(out, b[start:codeAt]...)
	out = append(out, 0x02, 0x7f) // the loop counter and the bulk length
	out = append(out, counterCheck(globals, weight(len(b)-codeAt, budget))...)
	// Second pass: copy with the checks inserted.
	copied, k := codeAt, 0
	_ = walkBody(b, codeAt, locals, globals, func(ev, at int, shift byte) {
		switch ev {
		case evLoop:
			out = append(out, b[copied:at]...)
			out = append(out, loopCheck(globals, counter, weight(loops[k], loopLimit))...)
			copied, k = at, k+1
		case evBulk:
			out = append(out, b[copied:at]...)
			out = append(out, bulkCharge(globals, tmp, shift)...)
			copied = at
		case evEnd:
			out = append(out, b[copied:]...)
			copied = len(b)
		}
	})
	return out, nil
}

// immediates skips the immediates of op (other than block, loop, if and
// end, which instrumentBody handles).
func (r *reader) immediates(op byte) error {
	var err error
	switch {
	case op == 0x00 || op == 0x01 || op == 0x05 || op == 0x0f || op == 0x1a || op == 0x1b ||
		op >= 0x45 && op <= 0xc4 || op == 0xd1:
		// unreachable, nop, else, return, drop, select, numeric (incl.
		// sign extension 0xc0..0xc4), ref.is_null: none
	case op == 0x0c || op == 0x0d || op == 0x10 || op == 0x12 || op == 0xd2 ||
		op >= 0x20 && op <= 0x26:
		// br, br_if, call, return_call, ref.func, local.*, global.*,
		// table.get/set: one index
		_, err = r.u32()
	case op == 0x0e: // br_table
		var n uint32
		if n, err = r.u32(); err != nil {
			return err
		}
		for i := uint32(0); i <= n && err == nil; i++ {
			_, err = r.u32()
		}
	case op == 0x11 || op == 0x13: // call_indirect, return_call_indirect
		if _, err = r.u32(); err == nil {
			_, err = r.u32()
		}
	case op == 0x1c: // select t*
		var n uint32
		if n, err = r.u32(); err != nil {
			return err
		}
		for i := uint32(0); i < n && err == nil; i++ {
			_, err = r.valType()
		}
	case op >= 0x28 && op <= 0x3e: // loads and stores
		err = r.memArg()
	case op == 0x3f || op == 0x40: // memory.size, memory.grow
		_, err = r.u32()
	case op == 0x41:
		_, err = r.sleb(32)
	case op == 0x42:
		_, err = r.sleb(64)
	case op == 0x43:
		_, err = r.bytes(4)
	case op == 0x44:
		_, err = r.bytes(8)
	case op == 0xd0: // ref.null
		_, err = r.refType()
	case op == 0xfc:
		err = r.prefixFC()
	default:
		return fmt.Errorf("%w: unsupported opcode %#x at byte %d of a function body", errInstrument, op, r.pos-1)
	}
	return err
}

func (r *reader) prefixFC() error {
	sub, err := r.u32()
	if err != nil {
		return err
	}
	switch {
	case sub <= 7: // saturating truncation
		return nil
	case sub == 8: // memory.init data, mem
		if _, err := r.u32(); err != nil {
			return err
		}
		_, err = r.u32()
	case sub == 9 || sub == 13 || sub >= 15 && sub <= 17: // data.drop, elem.drop, table.grow/size/fill
		_, err = r.u32()
	case sub == 10 || sub == 12 || sub == 14: // memory.copy, table.init, table.copy: two indices
		if _, err := r.u32(); err != nil {
			return err
		}
		_, err = r.u32()
	case sub == 11: // memory.fill
		_, err = r.u32()
	default:
		return fmt.Errorf("%w: unsupported instruction 0xfc %d", errInstrument, sub)
	}
	return err
}

// reader decodes the parts of the binary format instrument needs; every
// method fails (never panics) on truncated or overlong input.
type reader struct {
	b   []byte
	pos int
}

func (r *reader) byte() (byte, error) {
	if r.pos >= len(r.b) {
		return 0, fmt.Errorf("%w: truncated at byte %d", errInstrument, r.pos)
	}
	c := r.b[r.pos]
	r.pos++
	return c, nil
}

func (r *reader) bytes(n int) ([]byte, error) {
	if n < 0 || n > len(r.b)-r.pos {
		return nil, fmt.Errorf("%w: truncated at byte %d (want %d more)", errInstrument, r.pos, n)
	}
	b := r.b[r.pos : r.pos+n]
	r.pos += n
	return b, nil
}

// uleb reads an unsigned LEB128 number of at most bits bits.
func (r *reader) uleb(bits uint) (uint64, error) {
	var v uint64
	for shift := uint(0); ; shift += 7 {
		if shift >= bits {
			return 0, fmt.Errorf("%w: overlong integer at byte %d", errInstrument, r.pos)
		}
		c, err := r.byte()
		if err != nil {
			return 0, err
		}
		v |= uint64(c&0x7f) << shift
		if c&0x80 == 0 {
			return v, nil
		}
	}
}

func (r *reader) u32() (uint32, error) {
	v, err := r.uleb(32)
	if v > 1<<32-1 {
		return 0, fmt.Errorf("%w: integer out of range at byte %d", errInstrument, r.pos)
	}
	return uint32(v), err
}

// sleb reads a signed LEB128 number of at most bits bits.
func (r *reader) sleb(bits uint) (int64, error) {
	var v int64
	var shift uint
	for {
		if shift >= bits {
			return 0, fmt.Errorf("%w: overlong integer at byte %d", errInstrument, r.pos)
		}
		c, err := r.byte()
		if err != nil {
			return 0, err
		}
		v |= int64(c&0x7f) << shift
		shift += 7
		if c&0x80 == 0 {
			if shift < 64 && c&0x40 != 0 {
				v |= -1 << shift
			}
			return v, nil
		}
	}
}

// blockType reads a block type: empty, one value type, or a type index.
func (r *reader) blockType() error {
	v, err := r.sleb(33)
	if err != nil {
		return err
	}
	if v >= 0 {
		return nil // type index (multi-value)
	}
	switch v {
	case -64, -1, -2, -3, -4, -16, -17: // empty, i32, i64, f32, f64, funcref, externref
		return nil
	}
	return fmt.Errorf("%w: unsupported block type %d", errInstrument, v)
}

func (r *reader) valType() (byte, error) {
	t, err := r.byte()
	if err != nil {
		return 0, err
	}
	switch t {
	case 0x7f, 0x7e, 0x7d, 0x7c, 0x70, 0x6f:
		return t, nil
	}
	return 0, fmt.Errorf("%w: unsupported value type %#x", errInstrument, t)
}

func (r *reader) refType() (byte, error) {
	t, err := r.byte()
	if err != nil {
		return 0, err
	}
	if t != 0x70 && t != 0x6f {
		return 0, fmt.Errorf("%w: unsupported reference type %#x", errInstrument, t)
	}
	return t, nil
}

// limits reads table or memory limits (flags: bit 0 max present, bit 1
// shared, bit 2 64-bit).
func (r *reader) limits() error {
	flags, err := r.byte()
	if err != nil {
		return err
	}
	if flags > 7 {
		return fmt.Errorf("%w: unsupported limits flags %#x", errInstrument, flags)
	}
	if _, err := r.uleb(64); err != nil {
		return err
	}
	if flags&1 != 0 {
		_, err = r.uleb(64)
	}
	return err
}

// memArg reads alignment (bit 6: a memory index follows) and offset.
func (r *reader) memArg() error {
	align, err := r.u32()
	if err != nil {
		return err
	}
	if align&0x40 != 0 {
		if _, err := r.u32(); err != nil {
			return err
		}
	}
	_, err = r.uleb(64)
	return err
}

func appendU32(b []byte, v uint32) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v == 0 {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

func appendS32(b []byte, v int32) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

func appendName(b []byte, s string) []byte {
	return append(appendU32(b, uint32(len(s))), s...)
}
