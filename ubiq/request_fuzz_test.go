package ubiq

import (
	"encoding/json"
	"math"
	"testing"
)

// generalPosition reads a position-only AppendPeerProperties the way the
// general path does: two JSON decodes, then the position property.
func generalPosition(payload []byte) (x, y, z float64, ok bool) {
	var req Request
	if json.Unmarshal(payload, &req) != nil || req.Type != "AppendPeerProperties" {
		return 0, 0, 0, false
	}
	var a PropertiesArgs
	if json.Unmarshal([]byte(req.Args), &a) != nil || len(a.Keys) != 1 || len(a.Values) != 1 || a.Keys[0] != PositionKey {
		return 0, 0, 0, false
	}
	p, ok := parsePosition(a.Values[0])
	return p.X, p.Y, p.Z, ok
}

// FuzzPositionRequest: whatever a peer sends to the server, the fast path
// for positions either declines it or reads exactly the finite position
// that the general path reads.
func FuzzPositionRequest(f *testing.F) {
	f.Add(EncodeRequest("AppendPeerProperties", PropertiesArgs{Keys: []string{PositionKey}, Values: []string{"[1.5,2,-3e2]"}}))
	f.Add(EncodeRequest("AppendPeerProperties", PropertiesArgs{Keys: []string{PositionKey}, Values: []string{"1 2 3"}}))
	f.Add(EncodeRequest("AppendPeerProperties", PropertiesArgs{Keys: []string{PositionKey}, Values: []string{"[NaN,0,0]"}}))
	f.Add([]byte(`{"type":"AppendPeerProperties","args":"{\"keys\":[\"xrealm.position\"],\"values\":[\"[1,2\"]}"}`))
	f.Fuzz(func(t *testing.T, payload []byte) {
		p, ok := positionRequest(payload)
		if !ok {
			return
		}
		for _, v := range []float64{p.X, p.Y, p.Z} {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				t.Fatalf("fast path read a non-finite position %+v from %q", p, payload)
			}
		}
		x, y, z, gok := generalPosition(payload)
		if !gok || x != p.X || y != p.Y || z != p.Z {
			t.Fatalf("fast path read %+v from %q, the general path %v %v %v (ok %v)", p, payload, x, y, z, gok)
		}
	})
}
