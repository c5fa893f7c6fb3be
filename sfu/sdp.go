package sfu

import "github.com/pion/webrtc/v4"

// Gathered creates pc's offer (offer true) or its answer, sets it as the
// local description and waits for ICE gathering, so that the SDP it returns
// carries every candidate: xrealm's signalling does not trickle.
func Gathered(pc *webrtc.PeerConnection, offer bool) (string, error) {
	var d webrtc.SessionDescription
	var err error
	if offer {
		d, err = pc.CreateOffer(nil)
	} else {
		d, err = pc.CreateAnswer(nil)
	}
	if err != nil {
		return "", err
	}
	done := webrtc.GatheringCompletePromise(pc)
	if err := pc.SetLocalDescription(d); err != nil {
		return "", err
	}
	<-done
	return pc.LocalDescription().SDP, nil
}
