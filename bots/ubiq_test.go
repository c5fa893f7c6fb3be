package bots

import "testing"

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
