package lock

import (
	"testing"
	"unsafe"
)

// TestLeaseSize keeps a Lease, which every acquisition allocates, within
// the 256-byte size class on 64-bit platforms: at 257 bytes the allocator
// rounds it up to 288. A new field that crosses the line should be paid
// for knowingly (see the flags at the end of Lease).
func TestLeaseSize(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("the limit is for 64-bit platforms")
	}
	if n := unsafe.Sizeof(Lease{}); n > 256 {
		t.Errorf("Lease is %d bytes; want at most 256 (the next size class is 288)", n)
	}
}
