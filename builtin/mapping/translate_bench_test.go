package mapping_test

import (
	"fmt"
	"testing"

	"github.com/hostd-dev/hostd/builtin/mapping"
)

// BenchmarkTranslate: logic→physical reads one queue record and its
// segments' bounds; physical→logic scans every queue record of the
// catalog (decoding only those that mention the queue id), so it grows
// with the number of logic queues.
//
//	go test ./builtin/mapping -run '^$' -bench Translate
func BenchmarkTranslate(b *testing.B) {
	for _, queues := range []int{10, 10000} {
		e := newEnv(b, mapping.Config{Brokers: brokers("a", "b")})
		e.apply(b, mapping.Change{Kind: mapping.KindCreate, Topic: "t", Queues: queues})
		vc := fmt.Sprintf("t/%d", queues/2)
		e.appendN(b, vc, 3, "x")
		tr, err := e.m.TranslateLogic(ctx, vc, 1)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("logic/queues=%d", queues), func(b *testing.B) {
			for b.Loop() {
				if _, err := e.m.TranslateLogic(ctx, vc, 1); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("physical/queues=%d", queues), func(b *testing.B) {
			for b.Loop() {
				if _, err := e.m.TranslatePhysical(ctx, tr.Broker, tr.QueueID, 1); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
