// Package volumetric is the point-cloud media pipeline of xrealm's SFU:
// a deterministic synthetic source (a moving human-sized figure), the
// multiple-description (MDC) split into 15/25/60% of the points by uniform
// sampling and its merge, Google Draco encoding of each description with
// 11-bit position quantisation, and a packetiser/reassembler that carries
// encoded descriptions in RTP payloads with a small header (client, frame,
// description, fragment).
//
// Receivers hold incomplete descriptions only within fixed bounds
// (Reassembler: MaxPending and MaxPendingBytes; FrameTracker:
// MaxTrackedPending, MaxTrackedPendingBytes and MaxTrackedDone), evicting
// the oldest, so that a sender that starts descriptions it never finishes
// cannot grow a node's memory.
//
// The package is transport-agnostic: it produces and consumes RTP payloads,
// and the sfu package moves them.
package volumetric
