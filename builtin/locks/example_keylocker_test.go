package locks_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/hostd-dev/hostd/builtin/locks"
	"github.com/hostd-dev/hostd/sdk/abi"
)

func ExampleKeyLocker() {
	l := locks.NewKeyLocker(locks.KeyLockerOptions{})
	defer l.Close()

	create := []abi.ResourceKey{
		{Domain: abi.DomainDatabase, Key: "db1", Mode: abi.Shared},
		{Domain: abi.DomainCollection, Key: "db1.users", Mode: abi.Exclusive},
	}
	g, err := l.Lock(context.Background(), "broadcast-1", create)
	if err != nil {
		panic(err)
	}
	// A second writer of the same collection is refused at once by TryLock.
	_, err = l.TryLock("broadcast-2", create[1:])
	var ce *locks.ConflictError
	fmt.Println(errors.As(err, &ce), ce.Key.Key, ce.Holders)
	g.Unlock()
	_, err = l.TryLock("broadcast-2", create[1:])
	fmt.Println(err)
	// Output:
	// true db1.users [broadcast-1]
	// <nil>
}
