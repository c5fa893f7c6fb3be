package sfu

import (
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xrealm/xrealm/sfu/allocator"
	"github.com/xrealm/xrealm/volumetric"
)

// collector reports a node's state when scraped, so that forwarding pays
// for atomic counters only.
type collector struct{ n *Node }

var (
	descClients    = prometheus.NewDesc("xrealm_sfu_clients", "Clients connected to the SFU node.", []string{"node"}, nil)
	descSources    = prometheus.NewDesc("xrealm_sfu_sources", "Source tracks on the node, published here (local) or relayed from another node.", []string{"node", "origin"}, nil)
	descLinks      = prometheus.NewDesc("xrealm_sfu_relay_links", "Open relay links to other nodes.", []string{"node"}, nil)
	descSrcBytes   = prometheus.NewDesc("xrealm_sfu_source_bytes_total", "RTP bytes received per source track.", []string{"node", "track", "origin"}, nil)
	descSrcPackets = prometheus.NewDesc("xrealm_sfu_source_packets_total", "RTP packets received per source track.", []string{"node", "track", "origin"}, nil)
	descSrcRate    = prometheus.NewDesc("xrealm_sfu_source_bitrate_bps", "Measured bitrate per source track.", []string{"node", "track", "origin"}, nil)
	descSrcRelays  = prometheus.NewDesc("xrealm_sfu_source_relays", "Nodes a local source track is relayed to.", []string{"node", "track"}, nil)
	descSrcState   = prometheus.NewDesc("xrealm_sfu_source_state", "1 while a local source track is idle (nothing sent for 2 s) or speaking (audio level of -50 dBov or louder in the last 2 s), else 0.", []string{"node", "track", "state"}, nil)
	descRelayBytes = prometheus.NewDesc("xrealm_sfu_relay_bytes_total", "Bytes on relay links.", []string{"node", "peer", "dir"}, nil)
	descRelayDrop  = prometheus.NewDesc("xrealm_sfu_relay_dropped_total", "Packets dropped on a full relay link (send buffer over its cap, or no free RTP slot).", []string{"node", "peer"}, nil)
	descRelayRef   = prometheus.NewDesc("xrealm_sfu_relay_refused_total", "Control messages from a peer node that its relay link refused (a slot announcement for a mid that is none of the link's RTP receive slots).", []string{"node", "peer"}, nil)
	descRelaySlots = prometheus.NewDesc("xrealm_sfu_relay_slots", "RTP send slots of a relay link, in use and in all (none: media on the SCTP channel).", []string{"node", "peer", "state"}, nil)
	descSubBytes   = prometheus.NewDesc("xrealm_sfu_subscriber_bytes_total", "Bytes sent per subscriber, retransmissions included.", []string{"node", "client"}, nil)
	descSubPackets = prometheus.NewDesc("xrealm_sfu_subscriber_packets_total", "Packets forwarded per subscriber.", []string{"node", "client"}, nil)
	descSubNACK    = prometheus.NewDesc("xrealm_sfu_subscriber_nacks_total", "Sequence numbers NACKed by the subscriber.", []string{"node", "client"}, nil)
	descSubRTX     = prometheus.NewDesc("xrealm_sfu_subscriber_retransmits_total", "NACKs answered from the shared buffers.", []string{"node", "client"}, nil)
	descSubLost    = prometheus.NewDesc("xrealm_sfu_subscriber_lost_packets", "Packets the subscriber never got, by its receiver reports (cumulative, summed over its slots): loss after NACK recovery; xrealm_sfu_subscriber_nacks_total counts it before.", []string{"node", "client"}, nil)
	descSubMiss    = prometheus.NewDesc("xrealm_sfu_subscriber_retransmit_misses_total", "NACKs not answerable (packet no longer buffered): loss after recovery.", []string{"node", "client"}, nil)
	descSubEst     = prometheus.NewDesc("xrealm_sfu_subscriber_estimate_bps", "Send-side bandwidth estimate per subscriber.", []string{"node", "client"}, nil)
	descSubAlloc   = prometheus.NewDesc("xrealm_sfu_subscriber_allocated_bps", "Bitrate the allocator forwards to the subscriber (compare with the estimate).", []string{"node", "client"}, nil)
	descSrcFrames  = prometheus.NewDesc("xrealm_sfu_source_frame_completion_ratio", "Point-cloud descriptions complete at this node within 500 ms, over all seen (lost ones upstream lower it).", []string{"node", "track", "origin"}, nil)
	descSrcLat     = prometheus.NewDesc("xrealm_sfu_source_frame_latency_seconds", "Capture to last fragment at this node, per point-cloud description (quantiles over the last 2048).", []string{"node", "track", "origin"}, nil)
	descSubFrames  = prometheus.NewDesc("xrealm_sfu_subscriber_frame_completion_ratio", "Point-cloud descriptions the subscriber completed, over all it saw (reported by the client, op stats).", []string{"node", "client"}, nil)
	descSubLat     = prometheus.NewDesc("xrealm_sfu_subscriber_frame_latency_seconds", "Capture to complete description at the subscriber (reported by the client, op stats).", []string{"node", "client"}, nil)
	descSubIgnored = prometheus.NewDesc("xrealm_sfu_subscriber_nacks_ignored_total", "NACKs not answered: the track was paused (reason paused), or the packet was sent before the track last resumed or switched source (reason stale; a subscriber's SRTP would refuse it as a replay), or the subscriber's retransmissions took their bound, downtrack.RetransmitBytesPerSecond (reason limited).", []string{"node", "client", "reason"}, nil)
	descSubFetch   = prometheus.NewDesc("xrealm_sfu_subscriber_fetches_total", "NACKs not in a relayed source's buffer, forwarded to the origin node.", []string{"node", "client"}, nil)
	descFetch      = prometheus.NewDesc("xrealm_sfu_relay_nack_forwarded_total", "Sequence numbers this node asked origin nodes for (one request however many subscribers NACKed).", []string{"node"}, nil)
	descFetchOK    = prometheus.NewDesc("xrealm_sfu_relay_nack_recovered_total", "Forwarded NACKs whose packet arrived from the origin.", []string{"node"}, nil)
	descSubShare   = prometheus.NewDesc("xrealm_sfu_subscriber_link_share_bps", "The subscriber's share of the budget of its path (subscribers from one remote IP address), when that path has congested.", []string{"node", "client"}, nil)
	descSubQueue   = prometheus.NewDesc("xrealm_sfu_subscriber_queue_delay_seconds", "Queueing delay towards the subscriber: receiver-report round-trip time above its floor.", []string{"node", "client"}, nil)
	descSubTail    = prometheus.NewDesc("xrealm_sfu_subscriber_queue_tail_seconds", "95th percentile of the per-packet queueing delay (TWCC feedback) of the subscriber's shared-path group over the last interval.", []string{"node", "client"}, nil)
	descSubSlots   = prometheus.NewDesc("xrealm_sfu_subscriber_active_slots", "Receive slots carrying a track.", []string{"node", "client"}, nil)
	descProbes     = prometheus.NewDesc("xrealm_sfu_probes_total", "Probes for subscribers' floors paused for budget (a paused video or point cloud forwarded above the estimate for a while): started, kept (the estimate came to cover it), failed (the path queued, the estimate fell, or the window ended).", []string{"node", "result"}, nil)
	descPurged     = prometheus.NewDesc("xrealm_sfu_directory_purged_total", "Track directory entries removed because their node left or stopped sending heartbeats without announcing the tracks' removal (it crashed).", []string{"node"}, nil)
)

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descClients, descSources, descLinks, descSrcBytes, descSrcPackets, descSrcRate, descSrcRelays, descSrcState,
		descRelayBytes, descRelayDrop, descRelayRef, descRelaySlots, descSubBytes, descSubPackets, descSubNACK, descSubLost, descSubRTX, descSubMiss, descSubEst, descSubAlloc, descSubShare, descSubQueue, descSubTail, descSubSlots,
		descSrcFrames, descSrcLat, descSubFrames, descSubLat, descSubFetch, descSubIgnored, descFetch, descFetchOK, descPurged, descProbes} {
		ch <- d
	}
	for _, d := range dcDescs {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	n := c.n
	id := n.cfg.ID
	n.mu.Lock()
	peers := n.peerList("")
	local := make([]*source, 0, len(n.local))
	for _, s := range n.local {
		local = append(local, s)
	}
	relayed := make([]*source, 0, len(n.relayed))
	for _, s := range n.relayed {
		relayed = append(relayed, s)
	}
	// the links' metrics are made under the lock and sent after it: a
	// scraper that reads slowly must not hold the node
	var linkMetrics []prometheus.Metric
	links := 0
	for peerID, ls := range n.links {
		select {
		case <-ls.done:
			if l := ls.link; l != nil {
				links++
				linkMetrics = append(linkMetrics,
					prometheus.MustNewConstMetric(descRelayBytes, prometheus.CounterValue, float64(l.BytesIn.Load()), id, peerID, "in"),
					prometheus.MustNewConstMetric(descRelayBytes, prometheus.CounterValue, float64(l.BytesOut.Load()), id, peerID, "out"),
					prometheus.MustNewConstMetric(descRelayDrop, prometheus.CounterValue, float64(l.Dropped.Load()), id, peerID),
					prometheus.MustNewConstMetric(descRelayRef, prometheus.CounterValue, float64(l.Refused.Load()), id, peerID))
				if total, used := l.Slots(); total > 0 {
					linkMetrics = append(linkMetrics,
						prometheus.MustNewConstMetric(descRelaySlots, prometheus.GaugeValue, float64(used), id, peerID, "used"),
						prometheus.MustNewConstMetric(descRelaySlots, prometheus.GaugeValue, float64(total), id, peerID, "total"))
				}
			}
		default:
		}
	}
	n.mu.Unlock()
	for _, m := range linkMetrics {
		ch <- m
	}
	ch <- prometheus.MustNewConstMetric(descClients, prometheus.GaugeValue, float64(len(peers)), id)
	ch <- prometheus.MustNewConstMetric(descSources, prometheus.GaugeValue, float64(len(local)), id, "local")
	ch <- prometheus.MustNewConstMetric(descSources, prometheus.GaugeValue, float64(len(relayed)), id, "relay")
	ch <- prometheus.MustNewConstMetric(descLinks, prometheus.GaugeValue, float64(links), id)
	ch <- prometheus.MustNewConstMetric(descPurged, prometheus.CounterValue, float64(n.purged.Load()), id)
	for _, ev := range []allocator.ProbeEvent{allocator.ProbeStarted, allocator.ProbeKept, allocator.ProbeFailed} {
		ch <- prometheus.MustNewConstMetric(descProbes, prometheus.CounterValue, float64(n.probes[ev].Load()), id, ev.String())
	}
	now := time.Now()
	var fetched, recovered float64
	for origin, list := range map[string][]*source{"local": local, "relay": relayed} {
		for _, s := range list {
			k := s.info.Key()
			ch <- prometheus.MustNewConstMetric(descSrcBytes, prometheus.CounterValue, float64(s.bytes.Load()), id, k, origin)
			ch <- prometheus.MustNewConstMetric(descSrcPackets, prometheus.CounterValue, float64(s.packets.Load()), id, k, origin)
			ch <- prometheus.MustNewConstMetric(descSrcRate, prometheus.GaugeValue, float64(s.rate.Load()), id, k, origin)
			if origin == "local" {
				ch <- prometheus.MustNewConstMetric(descSrcRelays, prometheus.GaugeValue, float64(s.relayCount()), id, k)
				a := s.activity(TrackInfo{}, now)
				ch <- prometheus.MustNewConstMetric(descSrcState, prometheus.GaugeValue, b2f(a.Idle), id, k, "idle")
				if s.levelExt != 0 {
					ch <- prometheus.MustNewConstMetric(descSrcState, prometheus.GaugeValue, b2f(a.Speaking), id, k, "speaking")
				}
			}
			if s.frames != nil {
				fs := s.frames.Stats(now)
				ch <- prometheus.MustNewConstMetric(descSrcFrames, prometheus.GaugeValue, fs.CompletionRatio(), id, k, origin)
				ch <- prometheus.MustNewConstSummary(descSrcLat, fs.N, fs.Sum.Seconds(),
					map[float64]float64{0.5: fs.P50.Seconds(), 0.9: fs.P90.Seconds(), 0.99: fs.P99.Seconds()}, id, k, origin)
			}
			if s.fetch != nil {
				fetched += float64(s.fetch.requested.Load())
				recovered += float64(s.fetch.recovered.Load())
			}
		}
	}
	ch <- prometheus.MustNewConstMetric(descFetch, prometheus.CounterValue, fetched, id)
	ch <- prometheus.MustNewConstMetric(descFetchOK, prometheus.CounterValue, recovered, id)
	for _, p := range peers {
		var bytes, pkts, nacks, lost, rtx, miss, fetches, paused, stale, limited, active float64
		p.mu.Lock()
		for _, s := range p.slots {
			st := s.dt.Stats()
			bytes += float64(st.Bytes)
			pkts += float64(st.Packets)
			nacks += float64(st.NACKs)
			lost += float64(st.Lost)
			rtx += float64(st.Retransmits)
			miss += float64(st.RetransmitMisses)
			fetches += float64(st.Fetches)
			paused += float64(st.PausedNACKs)
			stale += float64(st.StaleNACKs)
			limited += float64(st.LimitedNACKs)
			if s.src != nil {
				active++
			}
		}
		alloc, share, qdelay, tail, grouped := p.allocated, p.linkShare(), p.link.qdelay, p.link.tail, p.link.remote != ""
		p.mu.Unlock()
		client := p.session + "/" + p.client
		ch <- prometheus.MustNewConstMetric(descSubBytes, prometheus.CounterValue, bytes, id, client)
		ch <- prometheus.MustNewConstMetric(descSubPackets, prometheus.CounterValue, pkts, id, client)
		ch <- prometheus.MustNewConstMetric(descSubNACK, prometheus.CounterValue, nacks, id, client)
		ch <- prometheus.MustNewConstMetric(descSubLost, prometheus.GaugeValue, lost, id, client)
		ch <- prometheus.MustNewConstMetric(descSubRTX, prometheus.CounterValue, rtx, id, client)
		ch <- prometheus.MustNewConstMetric(descSubMiss, prometheus.CounterValue, miss, id, client)
		ch <- prometheus.MustNewConstMetric(descSubSlots, prometheus.GaugeValue, active, id, client)
		ch <- prometheus.MustNewConstMetric(descSubFetch, prometheus.CounterValue, fetches, id, client)
		ch <- prometheus.MustNewConstMetric(descSubIgnored, prometheus.CounterValue, paused, id, client, "paused")
		ch <- prometheus.MustNewConstMetric(descSubIgnored, prometheus.CounterValue, stale, id, client, "stale")
		ch <- prometheus.MustNewConstMetric(descSubIgnored, prometheus.CounterValue, limited, id, client, "limited")
		p.collectDC(ch, id, client)
		if f := p.frames.Load(); f != nil {
			fs := volumetric.FrameStats{Complete: f.Complete, Expired: f.Expired}
			ch <- prometheus.MustNewConstMetric(descSubFrames, prometheus.GaugeValue, fs.CompletionRatio(), id, client)
			ch <- prometheus.MustNewConstSummary(descSubLat, f.Count, f.SumMs/1000,
				map[float64]float64{0.5: f.P50Ms / 1000, 0.9: f.P90Ms / 1000, 0.99: f.P99Ms / 1000}, id, client)
		}
		if e := p.est.Load(); e != nil {
			ch <- prometheus.MustNewConstMetric(descSubEst, prometheus.GaugeValue, float64(e.GetTargetBitrate()), id, client)
		}
		if !math.IsInf(share, 1) {
			ch <- prometheus.MustNewConstMetric(descSubShare, prometheus.GaugeValue, share, id, client)
		}
		ch <- prometheus.MustNewConstMetric(descSubQueue, prometheus.GaugeValue, qdelay.Seconds(), id, client)
		if tail >= 0 && grouped {
			ch <- prometheus.MustNewConstMetric(descSubTail, prometheus.GaugeValue, tail.Seconds(), id, client)
		}
		if alloc < 1e15 {
			ch <- prometheus.MustNewConstMetric(descSubAlloc, prometheus.GaugeValue, alloc, id, client)
		}
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
