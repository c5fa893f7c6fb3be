package bots

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"time"
)

// CameraPose is the pose an ARENA camera message carries.
type CameraPose struct {
	ObjectID string
	Pose     Pose
	// SentNanos is when the sender says it sent the pose (Unix ns): the
	// bots' data.xrealm_ts_ns, or the ISO 8601 "timestamp" ARENA's and
	// xrealm's browser clients put on every message; 0 if it says none.
	SentNanos int64
}

// ErrNotCamera is returned by ParseCameraPose for a well-formed ARENA
// message that is not a camera's pose update (another object, a delete,
// a click): a recorder skips it.
var ErrNotCamera = errors.New("not a camera pose update")

// arenaMessage is the part of an ARENA object message a pose needs.
type arenaMessage struct {
	ObjectID  string `json:"object_id"`
	Action    string `json:"action"`
	Timestamp string `json:"timestamp"`
	Data      struct {
		SentNanos  json.RawMessage `json:"xrealm_ts_ns"`
		ObjectType string          `json:"object_type"`
		Position   *arenaVec       `json:"position"`
		Rotation   json.RawMessage `json:"rotation"`
	} `json:"data"`
}

type arenaVec struct{ X, Y, Z *float64 }

type arenaRot struct{ X, Y, Z, W *float64 }

// ParseCameraPose reads the camera pose of an ARENA message, as the
// browser clients (ARENA's and xrealm's) and arena-py send them:
// {"object_id", "action": "update", "data": {"object_type": "camera",
// "position": {x, y, z}, "rotation": {x, y, z, w}}}. A rotation without w
// is A-Frame's Euler angles in degrees (order YXZ, as arena-py sends
// rotations it was given as Euler), and a missing rotation is none.
// It returns ErrNotCamera for another well-formed message, and an error
// that says what is wrong for a malformed camera pose.
func ParseCameraPose(payload []byte) (CameraPose, error) {
	var m arenaMessage
	if err := json.Unmarshal(payload, &m); err != nil {
		return CameraPose{}, fmt.Errorf("camera pose: %w", err)
	}
	if m.Data.ObjectType != "camera" || (m.Action != "update" && m.Action != "create") {
		return CameraPose{}, ErrNotCamera
	}
	if m.ObjectID == "" {
		return CameraPose{}, errors.New("camera pose: no object_id")
	}
	p := m.Data.Position
	if p == nil || p.X == nil || p.Y == nil || p.Z == nil {
		return CameraPose{}, fmt.Errorf("camera pose of %q: no position {x, y, z}", m.ObjectID)
	}
	pose := Pose{Pos: Vec3{*p.X, *p.Y, *p.Z}, Rot: NoRotation}
	if len(m.Data.Rotation) > 0 && string(m.Data.Rotation) != "null" {
		var r arenaRot
		if err := json.Unmarshal(m.Data.Rotation, &r); err != nil {
			return CameraPose{}, fmt.Errorf("camera pose of %q: rotation: %w", m.ObjectID, err)
		}
		switch {
		case r.X == nil || r.Y == nil || r.Z == nil:
			return CameraPose{}, fmt.Errorf("camera pose of %q: rotation %s lacks x, y or z", m.ObjectID, m.Data.Rotation)
		case r.W != nil:
			q := Quat{*r.X, *r.Y, *r.Z, *r.W}
			n := math.Sqrt(q.X*q.X + q.Y*q.Y + q.Z*q.Z + q.W*q.W)
			if !(n > 0) || math.IsInf(n, 0) {
				return CameraPose{}, fmt.Errorf("camera pose of %q: rotation %s is not a rotation quaternion", m.ObjectID, m.Data.Rotation)
			}
			pose.Rot = Quat{q.X / n, q.Y / n, q.Z / n, q.W / n}
		default:
			pose.Rot = eulerYXZ(*r.X, *r.Y, *r.Z)
		}
	}
	for _, v := range []float64{pose.Pos.X, pose.Pos.Y, pose.Pos.Z, pose.Rot.X, pose.Rot.Y, pose.Rot.Z, pose.Rot.W} {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return CameraPose{}, fmt.Errorf("camera pose of %q: a number is not finite", m.ObjectID)
		}
	}
	// A send time that does not read is no time, not an error: the pose
	// is still good.
	cp := CameraPose{ObjectID: m.ObjectID, Pose: pose}
	if v, err := strconv.ParseInt(string(m.Data.SentNanos), 10, 64); err == nil && v > 0 {
		cp.SentNanos = v
	} else if t, err := time.Parse(time.RFC3339Nano, m.Timestamp); err == nil && t.Year() > 1970 && t.Year() < 3000 {
		cp.SentNanos = t.UnixNano()
	}
	return cp, nil
}

// eulerYXZ is the quaternion of A-Frame's rotation x, y, z in degrees
// (three.js Euler order YXZ: yaw, then pitch, then roll).
func eulerYXZ(xDeg, yDeg, zDeg float64) Quat {
	const rad = math.Pi / 180
	sx, cx := math.Sincos(xDeg * rad / 2)
	sy, cy := math.Sincos(yDeg * rad / 2)
	sz, cz := math.Sincos(zDeg * rad / 2)
	return Quat{
		X: sx*cy*cz + cx*sy*sz,
		Y: cx*sy*cz - sx*cy*sz,
		Z: cx*cy*sz - sx*sy*cz,
		W: cx*cy*cz + sx*sy*sz,
	}
}

// TraceWriter writes a pose trace as its samples arrive (the format of
// Trace), so that a recording cut short is still a trace up to its last
// flushed line. Times are seconds since the first sample, and increase
// strictly, so the file stays readable by ReadTrace: a sample not later
// than the one before it is written 1 ns after it, and the samples after
// it keep their spacing. Poses that arrive in one read share its time (a
// server that batches its writes sends several poses of a camera at once):
// each is kept, in order, the latest taking effect at that time. A clock
// stepped back does not drop the samples that follow.
type TraceWriter struct {
	w       *bufio.Writer
	started bool
	first   int64 // Unix nanoseconds of the first sample, moved earlier by each sample not later than the one before
	last    int64 // nanoseconds since first of the last sample written
	n       int
	clock   int   // clockSender or clockReceiver, from the first pose (AddCamera)
	offset  int64 // receive time - send time at the last pose with both
}

// NewTraceWriter writes a trace's header line to w.
func NewTraceWriter(w io.Writer) (*TraceWriter, error) {
	tw := &TraceWriter{w: bufio.NewWriter(w)}
	if _, err := tw.w.WriteString(traceHeader + "\n"); err != nil {
		return nil, err
	}
	return tw, nil
}

const traceHeader = "# xrealm pose trace: t x y z qx qy qz qw"

// Add writes pose p taken at atNanos (Unix nanoseconds); one not later
// than the last sample is written 1 ns after it (see TraceWriter). It
// reports whether the sample was written: false only with an error.
func (tw *TraceWriter) Add(p Pose, atNanos int64) (bool, error) {
	if !tw.started {
		tw.started, tw.first = true, atNanos
	}
	ns := atNanos - tw.first
	if tw.n > 0 && ns <= tw.last {
		tw.first -= tw.last - ns + 1
		ns = tw.last + 1
	}
	// Distinct nanosecond counts below 2^53 are distinct float64 seconds,
	// and writeSample writes the time in its shortest exact form.
	if err := writeSample(tw.w, float64(ns)/1e9, p); err != nil {
		return false, err
	}
	tw.last = ns
	tw.n++
	return true, nil
}

// AddCamera writes a camera's pose received at recvNanos (Unix ns), at
// the time its sender says it sent it if the trace's first pose said one:
// a server that batches its writes (xrealm's linger) delivers a few poses
// in one read, and their receive times would squeeze them together and
// leave gaps. A later pose without a send time is placed by the offset
// between the clocks at the last one that had it; a trace whose first
// pose had none uses receive times throughout (one clock in one trace).
func (tw *TraceWriter) AddCamera(cp CameraPose, recvNanos int64) (bool, error) {
	if tw.n == 0 && tw.clock == 0 {
		tw.clock = clockReceiver
		if cp.SentNanos != 0 {
			tw.clock = clockSender
		}
	}
	at := recvNanos
	if tw.clock == clockSender {
		if cp.SentNanos != 0 {
			tw.offset = recvNanos - cp.SentNanos
			at = cp.SentNanos
		} else {
			at = recvNanos - tw.offset
		}
	}
	return tw.Add(cp.Pose, at)
}

// Which clock a trace's times come from.
const (
	clockSender   = 1
	clockReceiver = 2
)

// Samples is the number of samples written.
func (tw *TraceWriter) Samples() int { return tw.n }

// Flush writes buffered samples to the underlying writer.
func (tw *TraceWriter) Flush() error { return tw.w.Flush() }

// writeSample writes one trace line: the time exactly (shortest form:
// samples less than 1 ms apart must still increase when read back), the
// position to the millimetre and the rotation to four places.
func writeSample(w *bufio.Writer, t float64, p Pose) error {
	_, err := fmt.Fprintf(w, "%s %.3f %.3f %.3f %.4f %.4f %.4f %.4f\n", strconv.FormatFloat(t, 'f', -1, 64), p.Pos.X, p.Pos.Y, p.Pos.Z, p.Rot.X, p.Rot.Y, p.Rot.Z, p.Rot.W)
	return err
}
