package etcdcat

import "time"

func runtimeGosched() { time.Sleep(time.Millisecond) }
