package catalog_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/hostd-dev/hostd/runtime/catalog"
)

// An optimistic read-modify-write: Update re-runs the function when a
// concurrent writer changed what it read.
func ExampleUpdate() {
	db, err := catalog.OpenMemory()
	if err != nil {
		panic(err)
	}
	defer db.Close()
	ctx := context.Background()
	key := []byte(catalog.NSMapping + "topic/orders")
	type topic struct {
		Queues int `json:"queues"`
	}
	for i := 0; i < 3; i++ {
		err := catalog.Update(ctx, db, func(r *catalog.Tracked) ([]catalog.Op, error) {
			var t topic
			v, _, err := r.Get(key)
			switch {
			case errors.Is(err, catalog.ErrNotFound):
			case err != nil:
				return nil, err
			default:
				if err := catalog.DecodeJSON(key, v, &t); err != nil {
					return nil, err
				}
			}
			t.Queues++
			return []catalog.Op{{Key: key, Value: fmt.Appendf(nil, `{"queues":%d}`, t.Queues)}}, nil
		})
		if err != nil {
			panic(err)
		}
	}
	db.View(ctx, func(r catalog.Reader) error {
		v, _, _ := r.Get(key)
		fmt.Println(string(v))
		return nil
	})
	bad := catalog.DecodeJSON([]byte("mp/topic/broken"), []byte(`{"queues":`), new(topic))
	fmt.Println(bad)
	// Output:
	// {"queues":3}
	// catalog: cannot decode record "mp/topic/broken": unexpected EOF
}
