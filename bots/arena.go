package bots

import (
	"bytes"
	"strconv"
)

// TimestampField is the field of a pose's data that carries its send time,
// in nanoseconds since the Unix epoch. It comes first in data so that a
// receiver finds it after a short scan.
const TimestampField = "xrealm_ts_ns"

var tsKey = []byte(`"` + TimestampField + `":`)

// AppendPose appends the ARENA camera-pose message of objectID to b,
// padded with a "pad" string in data to at least size bytes in all.
func AppendPose(b []byte, objectID string, p Pose, sentNanos int64, size int) []byte {
	start := len(b)
	b = append(b, `{"object_id":"`...)
	b = append(b, objectID...)
	b = append(b, `","action":"update","type":"object","data":{"`...)
	b = append(b, TimestampField...)
	b = append(b, `":`...)
	b = strconv.AppendInt(b, sentNanos, 10)
	b = append(b, `,"object_type":"camera","position":{"x":`...)
	b = appendNum(b, p.Pos.X)
	b = append(b, `,"y":`...)
	b = appendNum(b, p.Pos.Y)
	b = append(b, `,"z":`...)
	b = appendNum(b, p.Pos.Z)
	b = append(b, `},"rotation":{"x":`...)
	b = appendNum(b, p.Rot.X)
	b = append(b, `,"y":`...)
	b = appendNum(b, p.Rot.Y)
	b = append(b, `,"z":`...)
	b = appendNum(b, p.Rot.Z)
	b = append(b, `,"w":`...)
	b = appendNum(b, p.Rot.W)
	b = append(b, '}')
	const padOverhead = len(`,"pad":""`) + len(`}}`)
	if n := size - (len(b) - start) - padOverhead; n > 0 {
		b = append(b, `,"pad":"`...)
		for i := 0; i < n; i++ {
			b = append(b, 'x')
		}
		b = append(b, '"')
	}
	return append(b, `}}`...)
}

func appendNum(b []byte, v float64) []byte {
	return strconv.AppendFloat(b, v, 'f', 3, 64)
}

// SentNanos returns the send timestamp a message carries in its
// TimestampField, or 0 if it has none.
func SentNanos(payload []byte) int64 {
	i := bytes.Index(payload, tsKey)
	if i < 0 {
		return 0
	}
	var v int64
	digits := 0
	for _, c := range payload[i+len(tsKey):] {
		if c < '0' || c > '9' {
			break
		}
		v = v*10 + int64(c-'0')
		digits++
		if digits > 19 {
			return 0
		}
	}
	return v
}

var (
	posKey = []byte(`"position":{`)
	xKey   = []byte(`"x":`)
	yKey   = []byte(`"y":`)
	zKey   = []byte(`"z":`)
)

// PositionOf returns the data.position of an ARENA message, as far as a
// quick scan finds it (no full JSON parse: it is for bots' boids, which
// read every message of a scene).
func PositionOf(payload []byte) (Vec3, bool) {
	i := bytes.Index(payload, posKey)
	if i < 0 {
		return Vec3{}, false
	}
	obj := payload[i+len(posKey):]
	if j := bytes.IndexByte(obj, '}'); j >= 0 {
		obj = obj[:j]
	}
	x, ok1 := numAfter(obj, xKey)
	y, ok2 := numAfter(obj, yKey)
	z, ok3 := numAfter(obj, zKey)
	return Vec3{x, y, z}, ok1 && ok2 && ok3
}

func numAfter(b, key []byte) (float64, bool) {
	i := bytes.Index(b, key)
	if i < 0 {
		return 0, false
	}
	b = b[i+len(key):]
	j := 0
	for j < len(b) && b[j] != ',' && b[j] != '}' {
		j++
	}
	v, err := strconv.ParseFloat(string(bytes.TrimSpace(b[:j])), 64)
	return v, err == nil
}

// ObjectIDOfTopic returns the last level of an ARENA scene topic
// ({realm}/s/{ns}/{scene}/{type}/{userClient}/{id}), the object id.
func ObjectIDOfTopic(topic []byte) []byte {
	if i := bytes.LastIndexByte(topic, '/'); i >= 0 {
		return topic[i+1:]
	}
	return topic
}
