package bots

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"
)

// Trace is a recorded pose trace.
//
// Its file format is text, one sample a line:
//
//	# comment
//	t x y z qx qy qz qw
//
// t is seconds since the start of the recording and increases strictly
// from line to line; x y z is the position in metres and qx qy qz qw the
// rotation quaternion, as ARENA sends them. Fields are separated by
// spaces or tabs; blank lines and lines starting with # are ignored.
type Trace struct {
	Samples []TraceSample
}

// TraceSample is one pose of a trace.
type TraceSample struct {
	T    float64 // seconds
	Pose Pose
}

// Duration returns the time the trace covers, at most the longest
// time.Duration (a trace from 0 to 1e10 s came out negative).
func (t *Trace) Duration() time.Duration {
	ns := t.span() * float64(time.Second)
	if ns >= math.MaxInt64 {
		return math.MaxInt64
	}
	return time.Duration(ns)
}

// span is the time the trace covers, in seconds.
func (t *Trace) span() float64 {
	if len(t.Samples) == 0 {
		return 0
	}
	return t.Samples[len(t.Samples)-1].T - t.Samples[0].T
}

// ReadTraceFile reads a trace file.
func ReadTraceFile(path string) (*Trace, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("pose trace: %w", err)
	}
	defer f.Close()
	t, err := ReadTrace(f)
	if err != nil {
		return nil, fmt.Errorf("pose trace %s: %w", path, err)
	}
	return t, nil
}

// MaxTraceSamples is the most samples ReadTrace takes: over a day of a
// browser's 10 poses a second, about 70 MB in memory (bots loop a trace,
// so a longer one is never needed, and a file of gigabytes would take
// the memory the bots need).
const MaxTraceSamples = 1_000_000

// maxTraceSpan is the longest time, in seconds, a trace's samples may
// span. A replay keeps its clock in float64 seconds into the trace; over
// spans far beyond this its steps of a tenth of a second would be lost to
// rounding and the replay would stand still.
const maxTraceSpan = 1e8

// maxTraceLine is the longest line ReadTrace reads; a sample takes well
// under 200 bytes.
const maxTraceLine = 64 << 10

// ReadTrace parses a trace (see Trace for the format).
func ReadTrace(r io.Reader) (*Trace, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxTraceLine)
	var t Trace
	line := 0
	for sc.Scan() {
		line++
		s := strings.TrimSpace(sc.Text())
		if s == "" || s[0] == '#' {
			continue
		}
		f := strings.Fields(s)
		if len(f) != 8 {
			return nil, fmt.Errorf("line %d: %d fields, want 8 (t x y z qx qy qz qw)", line, len(f))
		}
		var v [8]float64
		for i, x := range f {
			var err error
			if v[i], err = strconv.ParseFloat(x, 64); err != nil || math.IsNaN(v[i]) || math.IsInf(v[i], 0) {
				return nil, fmt.Errorf("line %d: field %d %q is not a finite number", line, i+1, x)
			}
		}
		if n := len(t.Samples); n > 0 && v[0] <= t.Samples[n-1].T {
			return nil, fmt.Errorf("line %d: time %g does not increase (previous %g)", line, v[0], t.Samples[n-1].T)
		}
		if len(t.Samples) == MaxTraceSamples {
			return nil, fmt.Errorf("line %d: more than %d samples (over a day at 10 poses a second): cut the trace, bots loop it", line, MaxTraceSamples)
		}
		t.Samples = append(t.Samples, TraceSample{T: v[0], Pose: Pose{Pos: Vec3{v[1], v[2], v[3]}, Rot: Quat{v[4], v[5], v[6], v[7]}}})
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("line %d: longer than %d KiB (a sample is one short line: t x y z qx qy qz qw; is this a pose trace?)", line+1, maxTraceLine>>10)
		}
		return nil, fmt.Errorf("line %d: %w", line+1, err)
	}
	if len(t.Samples) == 0 {
		return nil, fmt.Errorf("no samples (want lines of t x y z qx qy qz qw)")
	}
	if sp := t.span(); sp > maxTraceSpan {
		return nil, fmt.Errorf("the samples span %g s, more than %g s (about 3 years): times are in seconds", sp, float64(maxTraceSpan))
	}
	return &t, nil
}

// WriteTo writes the trace in its file format.
func (t *Trace) WriteTo(w io.Writer) (int64, error) {
	cw := &countWriter{w: w}
	bw := bufio.NewWriter(cw)
	bw.WriteString(traceHeader + "\n")
	for _, s := range t.Samples {
		writeSample(bw, s.T, s.Pose)
	}
	err := bw.Flush()
	return cw.n, err
}

// countWriter counts the bytes written through it.
type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// Record runs a behaviour alone for n steps of dt and returns its trace;
// it makes synthetic traces for replay.
func Record(b Behaviour, dt time.Duration, n int) *Trace {
	t := &Trace{Samples: make([]TraceSample, 0, n)}
	for i := 0; i < n; i++ {
		p := b.Step(dt, nil)
		t.Samples = append(t.Samples, TraceSample{T: float64(i) * dt.Seconds(), Pose: p})
	}
	return t
}

// Replay plays a trace, looping, interpolating between samples.
type Replay struct {
	tr    *Trace
	now   float64 // seconds into the trace
	i     int     // sample at or before now
	start float64
	dur   float64
}

// NewReplay plays tr starting phase seconds into it.
func NewReplay(tr *Trace, phase float64) *Replay {
	r := &Replay{tr: tr, start: tr.Samples[0].T, dur: tr.span()} // not Duration's: under 1 ns it is 0
	if r.dur > 0 {
		r.now = math.Mod(phase, r.dur)
	}
	return r
}

// Step advances the replay clock by dt.
func (r *Replay) Step(dt time.Duration, _ []Peer) Pose {
	s := r.tr.Samples
	if len(s) == 1 || r.dur <= 0 {
		return s[0].Pose
	}
	r.now += dt.Seconds()
	if r.now >= r.dur {
		r.now = math.Mod(r.now, r.dur)
		r.i = 0
	}
	t := r.start + r.now
	for r.i+1 < len(s) && s[r.i+1].T <= t {
		r.i++
	}
	if r.i+1 >= len(s) {
		return s[r.i].Pose
	}
	a, b := s[r.i], s[r.i+1]
	k := (t - a.T) / (b.T - a.T)
	return Pose{
		Pos: a.Pose.Pos.Add(b.Pose.Pos.Sub(a.Pose.Pos).Scale(k)),
		Rot: nlerp(a.Pose.Rot, b.Pose.Rot, k),
	}
}

func nlerp(a, b Quat, k float64) Quat {
	if a.X*b.X+a.Y*b.Y+a.Z*b.Z+a.W*b.W < 0 {
		b = Quat{-b.X, -b.Y, -b.Z, -b.W}
	}
	q := Quat{a.X + (b.X-a.X)*k, a.Y + (b.Y-a.Y)*k, a.Z + (b.Z-a.Z)*k, a.W + (b.W-a.W)*k}
	n := math.Sqrt(q.X*q.X + q.Y*q.Y + q.Z*q.Z + q.W*q.W)
	if n == 0 {
		return NoRotation
	}
	return Quat{q.X / n, q.Y / n, q.Z / n, q.W / n}
}
