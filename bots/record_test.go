package bots

import (
	"bytes"
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

func TestParseCameraPose(t *testing.T) {
	s := math.Sqrt(0.5)
	cases := []struct {
		name    string
		payload string
		want    CameraPose
		err     string // "" = no error; "not camera" = ErrNotCamera
	}{
		{"xrealm web client", `{"object_id":"camera_12_alice","action":"update","type":"object","persist":false,"data":{"object_type":"camera","position":{"x":1.25,"y":1.6,"z":-3},"rotation":{"x":0,"y":0.7071,"z":0,"w":0.7071}}}`,
			CameraPose{"camera_12_alice", Pose{Vec3{1.25, 1.6, -3}, Quat{0, s, 0, s}}, 0}, ""},
		{"xrealm web client with its timestamp", `{"object_id":"camera_12_alice","action":"update","type":"object","data":{"object_type":"camera","position":{"x":1,"y":1.6,"z":0},"rotation":{"x":0,"y":0,"z":0,"w":1}},"timestamp":"2026-11-24T06:00:00.123Z"}`,
			CameraPose{"camera_12_alice", Pose{Vec3{1, 1.6, 0}, NoRotation}, time.Date(2026, 11, 24, 6, 0, 0, 123e6, time.UTC).UnixNano()}, ""},
		{"bot pose", string(AppendPose(nil, "camera_bot7", Pose{Vec3{-2, 1.6, 4.5}, NoRotation}, 1234567890, 310)),
			CameraPose{"camera_bot7", Pose{Vec3{-2, 1.6, 4.5}, NoRotation}, 1234567890}, ""},
		{"a timestamp that does not read is no time", `{"object_id":"cam","action":"update","timestamp":"yesterday","data":{"xrealm_ts_ns":"soon","object_type":"camera","position":{"x":1,"y":2,"z":3}}}`,
			CameraPose{"cam", Pose{Vec3{1, 2, 3}, NoRotation}, 0}, ""},
		{"a negative send time is no time", `{"object_id":"cam","action":"update","data":{"xrealm_ts_ns":-5,"object_type":"camera","position":{"x":1,"y":2,"z":3}}}`,
			CameraPose{"cam", Pose{Vec3{1, 2, 3}, NoRotation}, 0}, ""},
		{"Euler degrees: a quarter turn of yaw", `{"object_id":"cam","action":"update","data":{"object_type":"camera","position":{"x":0,"y":0,"z":0},"rotation":{"x":0,"y":90,"z":0}}}`,
			CameraPose{"cam", Pose{Vec3{}, Quat{0, s, 0, s}}, 0}, ""},
		{"Euler degrees: pitch", `{"object_id":"cam","action":"update","data":{"object_type":"camera","position":{"x":0,"y":0,"z":0},"rotation":{"x":-90,"y":0,"z":0}}}`,
			CameraPose{"cam", Pose{Vec3{}, Quat{-s, 0, 0, s}}, 0}, ""},
		{"no rotation", `{"object_id":"cam","action":"create","data":{"object_type":"camera","position":{"x":1,"y":2,"z":3}}}`,
			CameraPose{"cam", Pose{Vec3{1, 2, 3}, NoRotation}, 0}, ""},
		{"quaternion not normalised", `{"object_id":"cam","action":"update","data":{"object_type":"camera","position":{"x":0,"y":0,"z":0},"rotation":{"x":0,"y":0,"z":0,"w":2}}}`,
			CameraPose{"cam", Pose{Vec3{}, NoRotation}, 0}, ""},
		{"another object", `{"object_id":"box","action":"update","data":{"object_type":"box","position":{"x":1,"y":2,"z":3}}}`, CameraPose{}, "not camera"},
		{"a camera's delete", `{"object_id":"cam","action":"delete","data":{"object_type":"camera"}}`, CameraPose{}, "not camera"},
		{"a click", `{"object_id":"box","action":"clientEvent","type":"mousedown","data":{"position":{"x":1,"y":2,"z":3},"source":"cam"}}`, CameraPose{}, "not camera"},
		{"not JSON", `camera`, CameraPose{}, "camera pose: invalid character"},
		{"truncated", `{"object_id":"cam","action":"update","data":{"object_type":"camera","position":{"x":1`, CameraPose{}, "unexpected end"},
		{"no position", `{"object_id":"cam","action":"update","data":{"object_type":"camera"}}`, CameraPose{}, `camera pose of "cam": no position`},
		{"position lacks z", `{"object_id":"cam","action":"update","data":{"object_type":"camera","position":{"x":1,"y":2}}}`, CameraPose{}, "no position"},
		{"position as strings", `{"object_id":"cam","action":"update","data":{"object_type":"camera","position":{"x":"1","y":2,"z":3}}}`, CameraPose{}, "cannot unmarshal string"},
		{"number out of range", `{"object_id":"cam","action":"update","data":{"object_type":"camera","position":{"x":1e400,"y":2,"z":3}}}`, CameraPose{}, "1e400"},
		{"no object id", `{"action":"update","data":{"object_type":"camera","position":{"x":1,"y":2,"z":3}}}`, CameraPose{}, "no object_id"},
		{"zero quaternion", `{"object_id":"cam","action":"update","data":{"object_type":"camera","position":{"x":0,"y":0,"z":0},"rotation":{"x":0,"y":0,"z":0,"w":0}}}`, CameraPose{}, "not a rotation quaternion"},
		{"rotation lacks z", `{"object_id":"cam","action":"update","data":{"object_type":"camera","position":{"x":0,"y":0,"z":0},"rotation":{"x":0,"y":0,"w":1}}}`, CameraPose{}, "lacks x, y or z"},
		{"rotation not an object", `{"object_id":"cam","action":"update","data":{"object_type":"camera","position":{"x":0,"y":0,"z":0},"rotation":[0,0,0,1]}}`, CameraPose{}, "rotation:"},
		{"huge Euler angle", `{"object_id":"cam","action":"update","data":{"object_type":"camera","position":{"x":0,"y":0,"z":0},"rotation":{"x":1e308,"y":0,"z":0}}}`, CameraPose{}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseCameraPose([]byte(c.payload))
			switch {
			case c.err == "not camera":
				if !errors.Is(err, ErrNotCamera) {
					t.Fatalf("got %+v, %v; want ErrNotCamera", got, err)
				}
			case c.err != "":
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("got %+v, %v; want an error with %q", got, err, c.err)
				}
			case err != nil:
				t.Fatal(err)
			case c.name == "huge Euler angle":
				checkUnit(t, got.Pose.Rot) // sin and cos of a huge angle are still a rotation
			default:
				if got.ObjectID != c.want.ObjectID || !closePose(got.Pose, c.want.Pose, 1e-4) || got.SentNanos != c.want.SentNanos {
					t.Fatalf("got %+v, want %+v", got, c.want)
				}
			}
		})
	}
}

func closePose(a, b Pose, eps float64) bool {
	d := []float64{a.Pos.X - b.Pos.X, a.Pos.Y - b.Pos.Y, a.Pos.Z - b.Pos.Z, a.Rot.X - b.Rot.X, a.Rot.Y - b.Rot.Y, a.Rot.Z - b.Rot.Z, a.Rot.W - b.Rot.W}
	for _, v := range d {
		if math.Abs(v) > eps {
			return false
		}
	}
	return true
}

func checkUnit(t *testing.T, q Quat) {
	t.Helper()
	if n := math.Sqrt(q.X*q.X + q.Y*q.Y + q.Z*q.Z + q.W*q.W); math.Abs(n-1) > 1e-9 {
		t.Fatalf("rotation %+v has norm %g, want 1", q, n)
	}
}

// An Euler rotation turns vectors as A-Frame's does: yaw about y first
// in the world, then pitch about the turned x (order YXZ).
func TestEulerYXZOrder(t *testing.T) {
	q := eulerYXZ(-30, 90, 0) // look 30° down after turning left 90°
	f := rotate(q, Vec3{0, 0, -1})
	// Turned left, the camera's forward (-z) points to -x; pitched down,
	// it has a negative y.
	want := Vec3{-math.Cos(math.Pi / 6), -math.Sin(math.Pi / 6), 0}
	if math.Abs(f.X-want.X) > 1e-9 || math.Abs(f.Y-want.Y) > 1e-9 || math.Abs(f.Z-want.Z) > 1e-9 {
		t.Fatalf("forward after eulerYXZ(-30, 90, 0) = %+v, want %+v", f, want)
	}
}

// rotate turns v by unit quaternion q.
func rotate(q Quat, v Vec3) Vec3 {
	// t = 2 q.xyz × v; v' = v + w t + q.xyz × t
	u := Vec3{q.X, q.Y, q.Z}
	cross := func(a, b Vec3) Vec3 { return Vec3{a.Y*b.Z - a.Z*b.Y, a.Z*b.X - a.X*b.Z, a.X*b.Y - a.Y*b.X} }
	tt := cross(u, v).Scale(2)
	return v.Add(tt.Scale(q.W)).Add(cross(u, tt))
}

// Times increase strictly in the file, and no sample is dropped: poses
// that arrive in one read share its time (xrealm batches a connection's
// writes, so a camera's poses can come two at once), and each is written
// 1 ns after the one before; a time that goes back (a clock stepped back)
// is written 1 ns after the last, and the samples after it keep their
// spacing.
func TestTraceWriter(t *testing.T) {
	var buf bytes.Buffer
	tw, err := NewTraceWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	const t0 = int64(1_700_000_000_000_000_000)
	in := []struct {
		at   int64
		pose Pose
		want int64 // nanoseconds in the trace
	}{
		{t0, Pose{Vec3{1, 1.6, 2}, NoRotation}, 0},
		{t0 + 100e6, Pose{Vec3{1.3, 1.6, 2}, NoRotation}, 100e6},
		{t0 + 100e6, Pose{Vec3{1.35, 1.6, 2}, NoRotation}, 100e6 + 1},                                      // same read: 1 ns later
		{t0 + 50e6, Pose{Vec3{1.4, 1.6, 2}, NoRotation}, 100e6 + 2},                                        // earlier: 1 ns later
		{t0 + 100e6 + 1, Pose{Vec3{1.401, 1.6, 2}, Quat{0, math.Sqrt(0.5), 0, math.Sqrt(0.5)}}, 150e6 + 3}, // 50 ms + 1 ns after the one before
		{t0 + 2e9, Pose{Vec3{-5, 1.6, 2}, NoRotation}, 2050e6 + 2},
	}
	var want []TraceSample
	for _, s := range in {
		kept, err := tw.Add(s.pose, s.at)
		if err != nil {
			t.Fatal(err)
		}
		if !kept {
			t.Fatalf("Add at %d: not kept", s.at-t0)
		}
		want = append(want, TraceSample{T: float64(s.want) / 1e9, Pose: s.pose})
	}
	if err := tw.Flush(); err != nil {
		t.Fatal(err)
	}
	if tw.Samples() != len(want) {
		t.Fatalf("Samples() = %d, want %d", tw.Samples(), len(want))
	}
	tr, err := ReadTrace(&buf)
	if err != nil {
		t.Fatalf("the written trace does not read back: %v\n%s", err, buf.String())
	}
	if len(tr.Samples) != len(want) {
		t.Fatalf("read %d samples, want %d", len(tr.Samples), len(want))
	}
	for i, s := range tr.Samples {
		if s.T != want[i].T || !closePose(s.Pose, want[i].Pose, 1e-4) {
			t.Errorf("sample %d = %+v, want %+v", i, s, want[i])
		}
	}
}

// AddCamera times poses by their sender's clock when the first had a send
// time: poses delivered in one read (a server's batched write) keep their
// spacing.
func TestTraceWriterAddCamera(t *testing.T) {
	const ms = int64(time.Millisecond)
	const t0 = int64(1_800_000_000_000_000_000)
	pose := func(x float64, sent int64) CameraPose {
		return CameraPose{ObjectID: "cam", Pose: Pose{Vec3{x, 1.6, 0}, NoRotation}, SentNanos: sent}
	}
	tests := []struct {
		name  string
		poses []CameraPose
		recv  []int64
		want  []float64 // seconds
	}{
		{"sender's clock: three poses in one read",
			[]CameraPose{pose(0, t0), pose(1, t0+100*ms), pose(2, t0+200*ms)},
			[]int64{t0 + 250*ms, t0 + 250*ms, t0 + 250*ms},
			[]float64{0, 0.1, 0.2}},
		{"sender's clock; a pose without a send time goes by the last offset",
			[]CameraPose{pose(0, t0), pose(1, t0+100*ms), pose(2, 0)},
			[]int64{t0 + 5*ms, t0 + 105*ms, t0 + 305*ms},
			[]float64{0, 0.1, 0.3}},
		{"receiver's clock when the first pose has no send time",
			[]CameraPose{pose(0, 0), pose(1, t0+900*ms), pose(2, 0)},
			[]int64{t0, t0 + 100*ms, t0 + 200*ms},
			[]float64{0, 0.1, 0.2}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			tw, err := NewTraceWriter(&buf)
			if err != nil {
				t.Fatal(err)
			}
			for i, p := range tc.poses {
				if _, err := tw.AddCamera(p, tc.recv[i]); err != nil {
					t.Fatal(err)
				}
			}
			tw.Flush()
			tr, err := ReadTrace(&buf)
			if err != nil {
				t.Fatal(err)
			}
			for i, s := range tr.Samples {
				if math.Abs(s.T-tc.want[i]) > 1e-9 {
					t.Errorf("sample %d at %g s, want %g s", i, s.T, tc.want[i])
				}
			}
		})
	}
}

func FuzzParseCameraPose(f *testing.F) {
	f.Add([]byte(`{"object_id":"camera_12_alice","action":"update","type":"object","data":{"object_type":"camera","position":{"x":1.25,"y":1.6,"z":-3},"rotation":{"x":0,"y":0.7071,"z":0,"w":0.7071}}}`))
	f.Add([]byte(`{"object_id":"cam","action":"update","data":{"object_type":"camera","position":{"x":0,"y":0,"z":0},"rotation":{"x":0,"y":90,"z":0}}}`))
	f.Add(AppendPose(nil, "camera_bot1", Pose{Vec3{1, 2, 3}, NoRotation}, 1, 310))
	f.Add([]byte(`{"object_id":"box","action":"delete"}`))
	f.Add([]byte(`{"data":{"object_type":"camera","position":null,"rotation":null}}`))
	f.Fuzz(func(t *testing.T, payload []byte) {
		cp, err := ParseCameraPose(payload)
		if err != nil {
			return
		}
		if cp.ObjectID == "" {
			t.Fatal("a pose without an object id")
		}
		checkUnit(t, cp.Pose.Rot)
		for _, v := range []float64{cp.Pose.Pos.X, cp.Pose.Pos.Y, cp.Pose.Pos.Z} {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				t.Fatalf("position %+v is not finite", cp.Pose.Pos)
			}
		}
	})
}
