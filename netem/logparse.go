package netem

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// LogRecord is one line of a per-packet log.
type LogRecord struct {
	Enq, Deq uint64 // µs since the link started; Deq is meaningless when Dropped
	Bytes    int
	Dropped  bool
	Reason   string // "tail" or "loss" for drops
}

// ReadLog calls fn for each record of a per-packet log file.
func ReadLog(path string, fn func(LogRecord)) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("netem: open log: %w", err)
	}
	defer f.Close()
	return parseLog(path, f, fn)
}

func parseLog(name string, r io.Reader, fn func(LogRecord)) error {
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		f := strings.Fields(sc.Text())
		if len(f) < 3 {
			return fmt.Errorf("netem: log %s line %d: want at least 3 fields, got %q", name, line, sc.Text())
		}
		enq, err1 := strconv.ParseUint(f[0], 10, 64)
		deq, err2 := strconv.ParseInt(f[1], 10, 64)
		n, err3 := strconv.Atoi(f[2])
		if err1 != nil || err2 != nil || err3 != nil || n < 0 {
			return fmt.Errorf("netem: log %s line %d: malformed %q", name, line, sc.Text())
		}
		rec := LogRecord{Enq: enq, Bytes: n}
		if deq < 0 {
			rec.Dropped = true
			if len(f) > 3 {
				rec.Reason = f[3]
			}
		} else {
			rec.Deq = uint64(deq)
		}
		fn(rec)
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("netem: read log %s: %w", name, err)
	}
	return nil
}
