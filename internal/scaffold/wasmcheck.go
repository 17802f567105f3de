package scaffold

import (
	"bytes"
	"errors"
	"fmt"
	"os"

	"github.com/hostd-dev/hostd/sdk/abi"
)

// errWasm is wrapped by Exports errors.
var errWasm = errors.New("not a valid WebAssembly module")

// maxWasmFile bounds what CheckModule reads.
const maxWasmFile = 256 << 20

// CheckModule checks that the file is a WebAssembly module exporting
// abi.ExportABIMarker, abi.ExportHandle and abi.ExportAlloc. It is a
// build-time sanity check; hostd validates imports and exports fully when
// it loads the plugin.
func CheckModule(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrBuild, err)
	}
	if st.Size() > maxWasmFile {
		return fmt.Errorf("%w: %s: %d bytes is larger than %d", ErrBuild, path, st.Size(), maxWasmFile)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrBuild, err)
	}
	exp, err := Exports(b)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrBuild, path, err)
	}
	have := map[string]bool{}
	for _, e := range exp {
		have[e] = true
	}
	for _, want := range []string{abi.ExportABIMarker, abi.ExportHandle, abi.ExportAlloc} {
		if !have[want] {
			return fmt.Errorf("%w: %s does not export %q: is it a hostd plugin (does it import github.com/hostd-dev/hostd/sdk and register a handler)?", ErrBuild, path, want)
		}
	}
	return nil
}

// Exports returns the export names of a WebAssembly binary module. It reads
// only the section headers and the export section; it never panics on
// malformed input.
func Exports(b []byte) ([]string, error) {
	if len(b) < 8 || !bytes.Equal(b[:4], []byte("\x00asm")) {
		return nil, fmt.Errorf("%w: bad magic", errWasm)
	}
	if !bytes.Equal(b[4:8], []byte{1, 0, 0, 0}) {
		return nil, fmt.Errorf("%w: unsupported binary version", errWasm)
	}
	p := b[8:]
	for len(p) > 0 {
		id := p[0]
		size, n := uleb(p[1:])
		if n == 0 || size > uint64(len(p)-1-n) {
			return nil, fmt.Errorf("%w: truncated section %d", errWasm, id)
		}
		sec := p[1+n : 1+n+int(size)]
		p = p[1+n+int(size):]
		if id != 7 { // export section
			continue
		}
		count, n := uleb(sec)
		if n == 0 || count > uint64(len(sec)) {
			return nil, fmt.Errorf("%w: bad export count", errWasm)
		}
		sec = sec[n:]
		names := make([]string, 0, count)
		for i := uint64(0); i < count; i++ {
			l, n := uleb(sec)
			if n == 0 || l > uint64(len(sec)-n) {
				return nil, fmt.Errorf("%w: truncated export name", errWasm)
			}
			name := string(sec[n : n+int(l)])
			sec = sec[n+int(l):]
			if len(sec) < 1 {
				return nil, fmt.Errorf("%w: truncated export %q", errWasm, name)
			}
			_, n = uleb(sec[1:])
			if n == 0 {
				return nil, fmt.Errorf("%w: truncated export %q", errWasm, name)
			}
			sec = sec[1+n:]
			names = append(names, name)
		}
		return names, nil
	}
	return nil, nil
}

// uleb decodes an unsigned LEB128 of at most 10 bytes; n = 0 on error.
func uleb(b []byte) (v uint64, n int) {
	var shift uint
	for i := 0; i < len(b) && i < 10; i++ {
		v |= uint64(b[i]&0x7f) << shift
		if b[i]&0x80 == 0 {
			return v, i + 1
		}
		shift += 7
	}
	return 0, 0
}
