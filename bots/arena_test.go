package bots

import (
	"math"
	"testing"
)

// poseSentNanos must agree with SentNanos on every payload: poses of any
// object id and size, and payloads it does not recognise.
func TestPoseSentNanos(t *testing.T) {
	pose := Pose{Pos: Vec3{X: 1, Y: 1.6, Z: -3}, Rot: NoRotation}
	tests := []struct {
		name    string
		payload []byte
		want    int64
	}{
		{"short id", AppendPose(nil, "b", pose, 1234567890123456789, 0), 1234567890123456789},
		{"long id, padded", AppendPose(nil, "bot-with-a-long-name-12345", pose, 42, 500), 42},
		{"other JSON with the key", []byte(`{"data":{"xrealm_ts_ns":77}}`), 77},
		{"no timestamp", []byte(`{"object_id":"x","action":"update"}`), 0},
		{"unterminated id", []byte(`{"object_id":"x`), 0},
		{"empty", nil, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := poseSentNanos(tc.payload); got != tc.want || got != SentNanos(tc.payload) {
				t.Errorf("poseSentNanos = %d, SentNanos = %d, want %d", got, SentNanos(tc.payload), tc.want)
			}
		})
	}
}

func FuzzPoseSentNanos(f *testing.F) {
	f.Add(AppendPose(nil, "bot1", Pose{Rot: NoRotation}, 99, 200))
	f.Add([]byte(`{"object_id":"","action":"update","type":"object","data":{"xrealm_ts_ns":`))
	f.Fuzz(func(t *testing.T, p []byte) {
		// No timestamp key can start before the one the fast path reads
		// (the only quotes before it are at fixed places), so both read
		// the first key.
		if a, b := poseSentNanos(p), SentNanos(p); a != b {
			t.Errorf("poseSentNanos %d != SentNanos %d for %q", a, b, p)
		}
	})
}

// posePositionOf must return exactly what SentNanos and PositionOf return,
// bit for bit, for poses and for anything else.
func TestPosePositionOf(t *testing.T) {
	tests := []struct {
		name    string
		payload []byte
	}{
		{"pose", AppendPose(nil, "bot7", Pose{Pos: Vec3{X: 12.5, Y: 1.6, Z: -3.25}, Rot: NoRotation}, 1234567890123456789, 500)},
		{"negative zero and large", AppendPose(nil, "b", Pose{Pos: Vec3{X: math.Copysign(0, -1), Y: 99999999.999, Z: -0.0004}, Rot: NoRotation}, 1, 0)},
		{"too many digits", AppendPose(nil, "b", Pose{Pos: Vec3{X: 1e15, Y: 2, Z: 3}, Rot: NoRotation}, 5, 0)},
		{"exponent", []byte(`{"object_id":"b","action":"update","type":"object","data":{"xrealm_ts_ns":9,"object_type":"camera","position":{"x":1e3,"y":2,"z":3}}}`)},
		{"spaces", []byte(`{"object_id":"b","action":"update","type":"object","data":{"xrealm_ts_ns":9,"object_type":"camera","position":{"x": 1,"y":2,"z":3}}}`)},
		{"trailing dot", []byte(`{"object_id":"b","action":"update","type":"object","data":{"xrealm_ts_ns":9,"object_type":"camera","position":{"x":1.,"y":.5,"z":-.5}}}`)},
		{"other order", []byte(`{"data":{"position":{"z":3,"y":2,"x":1},"xrealm_ts_ns":8}}`)},
		{"no position", AppendPose(nil, "b", Pose{Rot: NoRotation}, 3, 0)[:60]},
		{"empty", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { checkPosePositionOf(t, tc.payload) })
	}
}

func checkPosePositionOf(t *testing.T, p []byte) {
	t.Helper()
	sent, pos, ok := posePositionOf(p)
	wantPos, wantOK := PositionOf(p)
	same := func(a, b float64) bool { return math.Float64bits(a) == math.Float64bits(b) }
	if sent != SentNanos(p) || ok != wantOK || !same(pos.X, wantPos.X) || !same(pos.Y, wantPos.Y) || !same(pos.Z, wantPos.Z) {
		t.Errorf("posePositionOf(%q) = %d, %v, %v; want %d, %v, %v", p, sent, pos, ok, SentNanos(p), wantPos, wantOK)
	}
}

func FuzzPosePositionOf(f *testing.F) {
	f.Add(AppendPose(nil, "bot1", Pose{Pos: Vec3{X: -1.5, Y: 1.6, Z: 100}, Rot: NoRotation}, 99, 200))
	f.Add([]byte(`{"object_id":"b","action":"update","type":"object","data":{"xrealm_ts_ns":9,"object_type":"camera","position":{"x":1,"y":2,"z":3}}}`))
	f.Fuzz(func(t *testing.T, p []byte) { checkPosePositionOf(t, p) })
}
