package wasm

import (
	"strconv"
	"sync"
	"testing"
)

// Many goroutines run read-modify-write callbacks on a pool of 4 and
// commit them optimistically, re-running on conflict (as the broadcast
// engine does), while the plugins are reloaded: no update is lost.
func TestHammerCountersAndReloads(t *testing.T) {
	store := openStore(t)
	dir := t.TempDir()
	copyTo(t, echoWasm(t), dir, "echo.wasm")
	r := mustRuntime(t, Config{Dir: dir, Store: store, Defaults: Limits{PoolSize: 4}})
	const workers, per = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < per; i++ {
				for {
					res, err := r.Ack(bg, msg("Counter", ""))
					if err != nil {
						errs <- err
						return
					}
					err = commit(bg, store, res)
					if err == nil {
						break
					}
					if !isConflict(err) {
						errs <- err
						return
					}
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < 3; i++ {
			copyTo(t, echoWasm(t), dir, "echo.wasm")
			if err := r.Reload(bg); err != nil {
				errs <- err
			}
			_ = r.List()
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	v, _, err := r.KVGet(bg, "echo", []byte("n"))
	if err != nil || string(v) != strconv.Itoa(workers*per) {
		t.Fatalf("counter = %q (%v), want %d", v, err, workers*per)
	}
}

// Crashing calls interleaved with good ones on a shared pool: every good
// call succeeds, every crash is reported, the pool ends full.
func TestHammerCrashesAndCalls(t *testing.T) {
	r := mustRuntime(t, Config{Plugins: []Spec{{Name: "faults", Path: faultsWasm(t), Limits: Limits{PoolSize: 3}}}})
	const workers, per, crashes = 4, 30, 6
	var wg sync.WaitGroup
	errs := make(chan error, workers+1)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < per; i++ {
				if _, err := r.Ack(bg, msg("Trap", "ok")); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < crashes; i++ {
			typ, payload, kind := "Trap", "trap", KindTrap
			if i%2 == 1 {
				typ, payload, kind = "Panic", "panic", KindPanic
			}
			if _, err := r.Ack(bg, msg(typ, payload)); KindOf(err) != kind {
				errs <- err
				return
			}
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return r.List()[0].Live == 3 })
	if l := r.List()[0]; l.Calls != workers*per+crashes || l.Failures != crashes {
		t.Fatalf("List = %+v", l)
	}
}
