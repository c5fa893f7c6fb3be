package bots

import (
	"bytes"
	"math"
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
// read every message of a scene). Coordinates that are not finite
// numbers are no position.
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
	// ParseFloat also reads "NaN" and "Inf", which no JSON number is.
	return v, err == nil && !math.IsNaN(v) && !math.IsInf(v, 0)
}

// ObjectIDOfTopic returns the last level of an ARENA scene topic
// ({realm}/s/{ns}/{scene}/{type}/{userClient}/{id}), the object id.
func ObjectIDOfTopic(topic []byte) []byte {
	if i := bytes.LastIndexByte(topic, '/'); i >= 0 {
		return topic[i+1:]
	}
	return topic
}

// What AppendPose writes before the object id, and from the end of the
// object id to the timestamp's digits.
var (
	poseHead = []byte(`{"object_id":"`)
	poseMid  = []byte(`","action":"update","type":"object","data":{"` + TimestampField + `":`)
)

// poseSentNanos is SentNanos for a pose made by AppendPose, without
// searching the payload for the timestamp key: the key sits right after
// the object id. Other payloads go to SentNanos.
func poseSentNanos(p []byte) int64 {
	if v, _, ok := poseTimestamp(p); ok {
		return v
	}
	return SentNanos(p)
}

// poseTimestamp reads the timestamp of a pose made by AppendPose and
// returns the rest of the payload after its digits; ok is false for any
// other payload (and for more than 19 digits, where SentNanos gives 0).
func poseTimestamp(p []byte) (v int64, rest []byte, ok bool) {
	if !bytes.HasPrefix(p, poseHead) {
		return 0, nil, false
	}
	j := bytes.IndexByte(p[len(poseHead):], '"')
	if j < 0 {
		return 0, nil, false
	}
	rest = p[len(poseHead)+j:]
	if !bytes.HasPrefix(rest, poseMid) {
		return 0, nil, false
	}
	rest = rest[len(poseMid):]
	i := 0
	for ; i < len(rest) && rest[i] >= '0' && rest[i] <= '9'; i++ {
		if i == 19 {
			return 0, nil, false
		}
		v = v*10 + int64(rest[i]-'0')
	}
	return v, rest[i:], true
}

// What AppendPose writes between the timestamp and the position's x, and
// between the coordinates.
var (
	posePos = []byte(`,"object_type":"camera","position":{"x":`)
	poseY   = []byte(`,"y":`)
	poseZ   = []byte(`,"z":`)
)

// posePositionOf returns SentNanos and PositionOf of payload p in one
// pass for a pose made by AppendPose: the position follows the timestamp
// and its numbers are plain decimals. Other payloads go to SentNanos and
// PositionOf, so the results are always theirs.
func posePositionOf(p []byte) (sent int64, pos Vec3, ok bool) {
	sent, rest, ok := poseTimestamp(p)
	if ok && bytes.HasPrefix(rest, posePos) {
		rest = rest[len(posePos):]
		var okX, okY, okZ bool
		pos.X, rest, okX = plainDecimal(rest, ',')
		if okX && bytes.HasPrefix(rest, poseY) {
			pos.Y, rest, okY = plainDecimal(rest[len(poseY):], ',')
			if okY && bytes.HasPrefix(rest, poseZ) {
				pos.Z, _, okZ = plainDecimal(rest[len(poseZ):], '}')
				if okZ {
					return sent, pos, true
				}
			}
		}
	}
	if !ok {
		sent = SentNanos(p)
	}
	pos, ok = PositionOf(p)
	return sent, pos, ok
}

// pow10 holds the powers of ten that a float64 represents exactly.
var pow10 = [...]float64{1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15}

// plainDecimal reads [-]digits[.digits] up to the byte end, which must
// follow it, with at most 15 digits in all, and returns the rest from end
// on. The value is exactly strconv.ParseFloat's: the digits as an integer
// and the power of ten are both exact in a float64, and one division
// rounds correctly. Anything else (exponents, more digits, spaces) is not
// ok.
func plainDecimal(b []byte, end byte) (float64, []byte, bool) {
	i, neg := 0, false
	if i < len(b) && b[i] == '-' {
		neg = true
		i++
	}
	var m uint64
	digits, frac, dot := 0, 0, false
	for ; i < len(b); i++ {
		c := b[i]
		switch {
		case c >= '0' && c <= '9':
			if digits == 15 {
				return 0, nil, false
			}
			m = m*10 + uint64(c-'0')
			digits++
			if dot {
				frac++
			}
			continue
		case c == '.' && !dot:
			dot = true
			continue
		case c == end && digits > 0 && !(dot && frac == 0):
			v := float64(m) / pow10[frac]
			if neg {
				v = -v
			}
			return v, b[i:], true
		}
		return 0, nil, false
	}
	return 0, nil, false
}
