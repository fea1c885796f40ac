package client

import (
	"reflect"
	"unsafe"

	"github.com/redis/go-redis/v9"
)

// forgetSlot clears the cluster slot that go-redis keeps in a command once it has routed
// it (baseCmd.slotCache, since v9.23), so that the command is routed again by its
// arguments. readCopy sends one command twice, first with a copy's name as its key and
// then, when the copy misses or fails, with the original's: without this, the second
// send went to the copy's node, which answered MOVED (a round trip more) or, when down,
// an error instead of the original's value. go-redis has no exported way to clear it;
// a command without the field is left as it is, and TestCopyFallbackRoutesToOriginal
// fails if a go-redis upgrade brings the cache back under another name.
func forgetSlot(cmd redis.Cmder) {
	v := reflect.ValueOf(cmd)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return
	}
	f := v.Elem().FieldByName("slotCache") // promoted from the embedded baseCmd
	if !f.IsValid() || f.Kind() != reflect.Uint16 || !f.CanAddr() {
		return
	}
	*(*uint16)(unsafe.Pointer(f.UnsafeAddr())) = 0
}
