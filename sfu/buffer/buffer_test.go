package buffer

import (
	"bytes"
	"sync"
	"testing"
)

func TestBuffer(t *testing.T) {
	for _, size := range []int{0, 15, 100, 1 << 16} {
		if _, err := New(size); err == nil {
			t.Errorf("New(%d) succeeded", size)
		}
	}
	b, err := New(64)
	if err != nil {
		t.Fatal(err)
	}
	dst := make([]byte, MaxPacket)
	// across the sequence wrap
	for i := 0; i < 100; i++ {
		seq := uint16(65500 + i)
		if err := b.Write(seq, []byte{byte(i), 1, 2}); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		seq  uint16
		ok   bool
		want byte
	}{
		{63, true, 99},    // 65500+99 wrapped
		{0, true, 36},     // 65500+36, the oldest still held
		{65535, false, 0}, // 65500+35, overwritten
		{64, false, 0},    // not yet written
	}
	for _, tt := range tests {
		n, ok := b.Get(tt.seq, dst)
		if ok != tt.ok || (ok && (n != 3 || dst[0] != tt.want)) {
			t.Errorf("Get(%d) = %d %v %x, want %v %d", tt.seq, n, ok, dst[:n], tt.ok, tt.want)
		}
	}
	if err := b.Write(1, make([]byte, MaxPacket+1)); err == nil {
		t.Error("oversized write succeeded")
	}
}

func TestConcurrentReaders(t *testing.T) {
	b, _ := New(256)
	var wg sync.WaitGroup
	for r := 0; r < 4; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dst := make([]byte, MaxPacket)
			for i := 0; i < 2000; i++ {
				if n, ok := b.Get(uint16(i), dst); ok && !bytes.Equal(dst[:n], []byte{byte(i), byte(i >> 8)}) {
					t.Errorf("seq %d: %x", i, dst[:n])
					return
				}
			}
		}()
	}
	for i := 0; i < 2000; i++ {
		b.Write(uint16(i), []byte{byte(i), byte(i >> 8)})
	}
	wg.Wait()
}
