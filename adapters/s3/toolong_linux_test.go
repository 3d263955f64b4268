package s3_test

import (
	"context"
	"errors"
	"math"
	"syscall"
	"testing"

	fences3 "github.com/fencekit/fencekit/adapters/s3"
	"github.com/fencekit/fencekit/fence"
)

// TestValueTooLong: a value over MaxValueLen (5 GiB less the header) is
// refused with fence.ErrInvalid before any request. The value is address
// space that is mapped but never touched, so the test costs no memory.
func TestValueTooLong(t *testing.T) {
	n := fences3.MaxValueLen + 1
	if n > math.MaxInt {
		t.Skipf("a %d-byte value does not fit in this platform's int", n)
	}
	huge, err := syscall.Mmap(-1, 0, int(n), syscall.PROT_READ, syscall.MAP_PRIVATE|syscall.MAP_ANON|syscall.MAP_NORESERVE)
	if err != nil {
		t.Skipf("cannot map %d bytes of address space: %v", n, err)
	}
	defer syscall.Munmap(huge)
	if err := fences3.NewStore(ignoring{}, "b", nil).Put(context.Background(), "k", 1, huge); !errors.Is(err, fence.ErrInvalid) {
		t.Errorf("Put of MaxValueLen+1 bytes: %v; want ErrInvalid", err)
	}
}
