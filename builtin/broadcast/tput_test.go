package broadcast

import (
	"context"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestThroughputSmoke: 256 concurrent clients on the real stack complete
// and make progress (the numbers are in bench/broadcast). HOSTD_LONG=1
// runs longer and logs the rate.
func TestThroughputSmoke(t *testing.T) {
	v := newEnv(t, vcs(4), nil, nil)
	d := 300 * time.Millisecond
	if os.Getenv("HOSTD_LONG") == "1" {
		d = 3 * time.Second
	}
	var n atomic.Int64
	stop := time.Now().Add(d)
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < 256; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				r, err := v.e.Submit(context.Background(), &Request{Message: Message{Type: NoopType}, VChannels: vcs(4)})
				if err != nil || r.State != StateTombstone {
					t.Errorf("%+v %v", r, err)
					return
				}
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	t.Logf("%d broadcasts in %s: %.0f/s", n.Load(), el, float64(n.Load())/el.Seconds())
	if n.Load() == 0 {
		t.Fatal("no progress")
	}
}
