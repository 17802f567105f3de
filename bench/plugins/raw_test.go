package pluginbench

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/hostd-dev/hostd/internal/wasmtest"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// rawModule is testdata/rawparse instantiated in bare wazero.
type rawModule struct {
	mod         api.Module
	parse       api.Function
	ptr         uint32
	closeOnDone bool
}

func newRaw(tb testing.TB, closeOnDone bool) *rawModule {
	tb.Helper()
	path, err := wasmtest.BuildErr("testdata/rawparse")
	if err != nil {
		tb.Fatal(err)
	}
	bin, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	ctx := context.Background()
	cache, err := wazero.NewCompilationCacheWithDir(wasmtest.CacheDir())
	if err != nil {
		tb.Fatal(err)
	}
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCloseOnContextDone(closeOnDone).WithCompilationCache(cache))
	tb.Cleanup(func() { r.Close(ctx) })
	wasi_snapshot_preview1.MustInstantiate(ctx, r)
	code, err := r.CompileModule(ctx, bin)
	if err != nil {
		tb.Fatal(err)
	}
	mod, err := r.InstantiateModule(ctx, code, wazero.NewModuleConfig().WithStartFunctions("_initialize"))
	if err != nil {
		tb.Fatal(err)
	}
	res, err := mod.ExportedFunction("buf_ptr").Call(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	return &rawModule{mod: mod, parse: mod.ExportedFunction("parse"), ptr: api.DecodeU32(res[0]), closeOnDone: closeOnDone}
}

// call copies p into the guest and runs parse, with a per-call deadline
// when closeOnDone is set (as hostd does).
func (m *rawModule) call(p []byte) (uint64, error) {
	ctx := context.Background()
	if m.closeOnDone {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
	}
	m.mod.Memory().Write(m.ptr, p)
	res, err := m.parse.Call(ctx, uint64(len(p)))
	if err != nil {
		return 0, err
	}
	return res[0], nil
}

func benchRaw(m *rawModule, p []byte) func(*testing.B) {
	return func(b *testing.B) {
		b.SetBytes(int64(len(p)))
		for i := 0; i < b.N; i++ {
			if _, err := m.call(p); err != nil {
				b.Fatal(err)
			}
		}
	}
}

func TestRawMatchesNative(t *testing.T) {
	for _, closeOnDone := range []bool{false, true} {
		m := newRaw(t, closeOnDone)
		for _, s := range sizes {
			p := Payload(s.n)
			got, err := m.call(p)
			if err != nil {
				t.Fatal(err)
			}
			c, sum := Parse(p)
			if got != sum^uint64(c) {
				t.Fatalf("%s: raw %x != native %x", s.name, got, sum^uint64(c))
			}
		}
	}
}

func BenchmarkRaw(b *testing.B) {
	plain, closing := newRaw(b, false), newRaw(b, true)
	for _, s := range sizes {
		p := Payload(s.n)
		b.Run("wazero-raw/"+s.name, benchRaw(plain, p))
		b.Run("wazero-raw+close/"+s.name, benchRaw(closing, p))
	}
}
