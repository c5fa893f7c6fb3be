// Package interest computes areas of interest for rooms and scenes with many
// peers, so that a peer receives the updates of the peers that matter to it
// instead of everyone's.
//
// Two policies are provided. Hex-grid areas of interest (Grid, Ring,
// CellRoomID) map a position to a hexagonal cell; a peer is a member of its
// cell's room and observes the rooms of the cells around it. Server-side
// k-nearest-neighbour sets (KNN) give each peer the k peers nearest to it,
// recomputed at a fixed rate with a spatial index, with hysteresis so that a
// peer near the boundary of a set does not flicker in and out.
package interest
