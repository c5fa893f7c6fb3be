package hera

import (
	"encoding/json"
	"fmt"
	"os"
	"time"
)

// VectorFile is the format of testdata/vectors.json: hand-computed
// sequences of events and the window expected after each. The same file is
// checked against the Go implementation and the eBPF C core.
type VectorFile struct {
	Doc     string         `json:"doc"`
	Cases   []VectorCase   `json:"cases"`
	Filters []VectorFilter `json:"filters"`
}

// VectorFilter is a sequence of samples for one windowed filter on its
// own: the flow's min-RTT filter (Kind "min") or its delivered-BDP
// filter ("max").
type VectorFilter struct {
	Name     string       `json:"name"`
	Kind     string       `json:"kind"`
	WindowUs uint64       `json:"window_us"`
	Steps    []FilterStep `json:"steps"`
}

// FilterStep is a sample V at TUs and the filter's value Want after it.
type FilterStep struct {
	TUs  uint64 `json:"t_us"`
	V    uint32 `json:"v"`
	Want uint32 `json:"want"`
}

// VectorCase is one named sequence.
type VectorCase struct {
	Name   string       `json:"name"`
	Params VectorParams `json:"params"`
	// SharedPath makes all the case's flows share one Path.
	SharedPath bool          `json:"shared_path,omitempty"`
	Events     []VectorEvent `json:"events"`
}

// VectorParams mirrors Params with integer microseconds.
type VectorParams struct {
	Variant          string `json:"variant"`
	BucketUs         int64  `json:"bucket_us"`
	Backlog          int    `json:"backlog"`
	Buckets          int    `json:"buckets"`
	DeltaMax         uint32 `json:"delta_max"`
	HistCap          uint32 `json:"hist_cap"`
	MinCwnd          uint32 `json:"min_cwnd"`
	MaxCwnd          uint32 `json:"max_cwnd"`
	InitCwnd         uint32 `json:"init_cwnd"`
	DecreaseShift    uint32 `json:"decrease_shift"`
	LossBetaPermille uint32 `json:"loss_beta_permille"`
	MinRTTWindowUs   int64  `json:"min_rtt_window_us"`
	FloorGainEighths uint32 `json:"floor_gain_eighths,omitempty"`
	BDPWindowUs      int64  `json:"bdp_window_us,omitempty"`
	BucketPackets    uint32 `json:"bucket_packets,omitempty"`
	GateRTTs         uint32 `json:"gate_rtts,omitempty"`
	OutageRTTs       uint32 `json:"outage_rtts,omitempty"`
	OutageBoost      uint32 `json:"outage_boost_percent,omitempty"`
}

// VectorEvent is an ACK or, with Loss set, entry into loss recovery, or,
// with Undo set, the kernel's finding that the last loss was spurious.
type VectorEvent struct {
	Flow  int    `json:"flow,omitempty"`
	TUs   uint64 `json:"t_us"`
	RTTUs int64  `json:"rtt_us"`
	Acked uint32 `json:"acked"`
	Loss  bool   `json:"loss,omitempty"`
	Undo  bool   `json:"undo,omitempty"` // the kernel's undo of the last loss (OnUndo)
	Cwnd  uint32 `json:"cwnd"`
}

// Flows is the number of flows the case's events address.
func (c VectorCase) Flows() int {
	n := 1
	for _, e := range c.Events {
		n = max(n, e.Flow+1)
	}
	return n
}

// ToParams converts the vector's parameters.
func (vp VectorParams) ToParams() (Params, error) {
	var v Variant
	switch vp.Variant {
	case "hera":
		v = Tuned
	case "hera-paper":
		v = Paper
	default:
		return Params{}, fmt.Errorf("hera: vector variant %q unknown", vp.Variant)
	}
	p := Params{
		Variant:            v,
		BucketWidth:        time.Duration(vp.BucketUs) * time.Microsecond,
		Backlog:            vp.Backlog,
		Buckets:            vp.Buckets,
		DeltaMax:           vp.DeltaMax,
		HistCap:            vp.HistCap,
		MinCwnd:            vp.MinCwnd,
		MaxCwnd:            vp.MaxCwnd,
		InitCwnd:           vp.InitCwnd,
		DecreaseShift:      vp.DecreaseShift,
		LossBetaPermille:   vp.LossBetaPermille,
		MinRTTWindow:       time.Duration(vp.MinRTTWindowUs) * time.Microsecond,
		FloorGainEighths:   vp.FloorGainEighths,
		BDPWindow:          time.Duration(vp.BDPWindowUs) * time.Microsecond,
		BucketPackets:      vp.BucketPackets,
		GateRTTs:           vp.GateRTTs,
		OutageRTTs:         vp.OutageRTTs,
		OutageBoostPercent: vp.OutageBoost,
	}
	return p, p.Validate()
}

// LoadVectors reads a vector file.
func LoadVectors(path string) (*VectorFile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("hera: read vectors: %w", err)
	}
	var vf VectorFile
	if err := json.Unmarshal(b, &vf); err != nil {
		return nil, fmt.Errorf("hera: parse vectors %s: %w", path, err)
	}
	return &vf, nil
}
