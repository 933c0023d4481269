// A cgo program (#60): C leaks 50 x 100 bytes from a Go function, Go keeps
// 50 x 64 KiB of its own heap.
package main

/*
#include <stdlib.h>
__attribute__((noinline)) static void *c_leak(size_t n) { return malloc(n); }
*/
import "C"

import "fmt"

var kept [][]byte

//go:noinline
func handle(i int) {
	C.c_leak(100)
	kept = append(kept, make([]byte, 64<<10))
}

func main() {
	for i := 0; i < 50; i++ {
		handle(i)
	}
	fmt.Println("done", len(kept))
}
