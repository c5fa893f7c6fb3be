package bots

import (
	"io"
	"strconv"
	"strings"
	"testing"
)

// ReadTrace refuses what is not a pose trace with an error that names the
// line and what is wrong with it.
func TestReadTraceRefuses(t *testing.T) {
	good := "0 0 1.6 0 0 0 0 1\n"
	for _, tc := range []struct {
		name string
		in   io.Reader
		want []string // in the error
	}{
		{"empty", strings.NewReader(""), []string{"no samples"}},
		{"only comments", strings.NewReader("# t x y z qx qy qz qw\n\n"), []string{"no samples"}},
		{"too few fields", strings.NewReader(good + "1 2 3\n"), []string{"line 2", "3 fields"}},
		{"not a number", strings.NewReader(good + "1 0 x 0 0 0 0 1\n"), []string{"line 2", `"x"`}},
		{"time not increasing", strings.NewReader(good + good), []string{"line 2", "does not increase"}},
		// Named with its line, not bufio.Scanner's bare "token too long".
		{"a line of 70,000 bytes", strings.NewReader(good + "# ok\n" + strings.Repeat("1", 70000) + "\n"), []string{"line 3", "longer than 64 KiB"}},
		{"binary", strings.NewReader("\x00\x01\x02\xff\n"), []string{"line 1", "1 fields"}},
		// Refused: a replay of it would stand still, its steps lost to
		// rounding.
		{"spanning 1e300 s", strings.NewReader(good + "1e300 0 1.6 0 0 0 0 1\n"), []string{"span 1e+300 s", "in seconds"}},
		// A huge file is not read whole into memory: the error comes at
		// the sample after the last one taken.
		{"more than MaxTraceSamples", &sampleLines{n: MaxTraceSamples + 1}, []string{"line " + strconv.Itoa(MaxTraceSamples+1), "more than " + strconv.Itoa(MaxTraceSamples) + " samples"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := ReadTrace(tc.in)
			if err == nil {
				t.Fatalf("read %d samples, want an error", len(tr.Samples))
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// sampleLines reads as a trace of n samples, a tenth of a second apart,
// made as they are read.
type sampleLines struct {
	n, i int
	buf  []byte
}

func (s *sampleLines) Read(p []byte) (int, error) {
	for len(s.buf) < len(p) && s.i < s.n {
		s.buf = strconv.AppendFloat(s.buf, float64(s.i)/10, 'f', 1, 64)
		s.buf = append(s.buf, " 1 1.6 2 0 0 0 1\n"...)
		s.i++
	}
	if len(s.buf) == 0 {
		return 0, io.EOF
	}
	n := copy(p, s.buf)
	s.buf = s.buf[:copy(s.buf, s.buf[n:])]
	return n, nil
}
