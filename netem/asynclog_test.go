package netem

import (
	"bytes"
	"fmt"
	"testing"
)

func TestAsyncWriterKeepsOrderAndEverything(t *testing.T) {
	var out, want bytes.Buffer
	a := newAsyncWriter(&out)
	for i := range 200000 { // several chunks
		line := fmt.Sprintf("%d %d 1500\n", i, i+7)
		want.WriteString(line)
		a.Write([]byte(line))
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), want.Bytes()) {
		t.Fatalf("wrote %d bytes, want %d identical bytes", out.Len(), want.Len())
	}
}
