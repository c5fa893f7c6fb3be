// SPDX-License-Identifier: GPL-2.0-only
/*
 * hera.bpf.c - Hera as a Linux TCP congestion control in eBPF struct_ops.
 *
 * The rule itself is in hera_core.h (the C mirror of hera/hera.go). This file
 * wires it to the kernel: per-socket state lives in BPF_MAP_TYPE_SK_STORAGE
 * (the verifier rejects variable indexing into the socket's private
 * congestion-control area), the state shared by the flows to one
 * destination (the path's minimum RTT) in an LRU hash map, the window is
 * driven from cong_control with the rate sample's RTT, and loss is reported
 * through ssthresh.
 *
 * Build with cc/gen.sh; HERA_VARIANT selects hera (1) or hera-paper (0).
 * Parameters are read-only globals that the Go loader sets before loading.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

#define HERA_INLINE __always_inline
#include "hera_core.h"

#ifndef HERA_VARIANT
#define HERA_VARIANT HERA_TUNED
#endif

char _license[] SEC("license") = "GPL";

const volatile __u32 p_variant = HERA_VARIANT;
const volatile __u32 p_bucket_us = HERA_VARIANT == HERA_TUNED ? 2500 : 15000;
const volatile __u32 p_backlog = HERA_VARIANT == HERA_TUNED ? 1 : 10;
const volatile __u32 p_buckets = 6;
const volatile __u32 p_delta_max = 10;
const volatile __u32 p_hist_cap = HERA_VARIANT == HERA_TUNED ? 64 : 10000;
const volatile __u32 p_min_cwnd = HERA_VARIANT == HERA_TUNED ? 4 : 20;
const volatile __u32 p_max_cwnd = HERA_VARIANT == HERA_TUNED ? 20000 : 8000;
const volatile __u32 p_init_cwnd = 10;
const volatile __u32 p_decrease_shift = HERA_VARIANT == HERA_TUNED ? 3 : 0;
const volatile __u32 p_loss_beta_permille = HERA_VARIANT == HERA_TUNED ? 700 : 0;
const volatile __u64 p_min_rtt_window_us = 10000000;
const volatile __u32 p_floor_gain_eighths = HERA_VARIANT == HERA_TUNED ? 9 : 0;
const volatile __u64 p_bdp_window_us = 4000000;
const volatile __u32 p_pacing = HERA_VARIANT == HERA_TUNED;
const volatile __u32 p_bucket_packets = HERA_VARIANT == HERA_TUNED ? 10 : 0;
const volatile __u32 p_gate_rtts = HERA_VARIANT == HERA_TUNED ? 2 : 0;
const volatile __u32 p_pacing_max_rtts = HERA_VARIANT == HERA_TUNED ? 2 : 0;
const volatile __u32 p_outage_rtts = 0;          /* off by default (docs/hera.md item 19) */
const volatile __u32 p_outage_boost_percent = 0;

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct hera_state);
} hera_sk SEC(".maps");

/* Path state shared by the flows to one destination (hera.Path). */
struct hera_path_key {
	__u32 family;
	__u32 addr[4];
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct hera_path_key);
	__type(value, struct hera_path);
} hera_paths SEC(".maps");

static __always_inline struct hera_path *path_of(struct sock *sk)
{
	struct hera_path_key key = {};
	struct hera_path zero = {};
	struct hera_path *hp;

	key.family = sk->__sk_common.skc_family;
	if (key.family == 10 /* AF_INET6 */) {
		key.addr[0] = sk->__sk_common.skc_v6_daddr.in6_u.u6_addr32[0];
		key.addr[1] = sk->__sk_common.skc_v6_daddr.in6_u.u6_addr32[1];
		key.addr[2] = sk->__sk_common.skc_v6_daddr.in6_u.u6_addr32[2];
		key.addr[3] = sk->__sk_common.skc_v6_daddr.in6_u.u6_addr32[3];
	} else {
		key.addr[0] = sk->__sk_common.skc_daddr;
	}
	hp = bpf_map_lookup_elem(&hera_paths, &key);
	if (hp)
		return hp;
	bpf_map_update_elem(&hera_paths, &key, &zero, BPF_NOEXIST);
	return bpf_map_lookup_elem(&hera_paths, &key);
}

static __always_inline void load_params(struct hera_params *p)
{
	p->variant = p_variant;
	p->bucket_us = p_bucket_us;
	p->backlog = p_backlog;
	p->buckets = p_buckets;
	p->delta_max = p_delta_max;
	p->hist_cap = p_hist_cap;
	p->min_cwnd = p_min_cwnd;
	p->max_cwnd = p_max_cwnd;
	p->init_cwnd = p_init_cwnd;
	p->decrease_shift = p_decrease_shift;
	p->loss_beta_permille = p_loss_beta_permille;
	p->floor_gain_eighths = p_floor_gain_eighths;
	p->min_rtt_window_us = p_min_rtt_window_us;
	p->bdp_window_us = p_bdp_window_us;
	p->bucket_packets = p_bucket_packets;
	p->gate_rtts = p_gate_rtts;
	p->outage_rtts = p_outage_rtts;
	p->outage_boost_percent = p_outage_boost_percent;
}

static __always_inline struct tcp_sock *tcp_sk_of(struct sock *sk)
{
	return (struct tcp_sock *)sk;
}

/*
 * The window hera gives the socket: at most snd_cwnd_clamp (a locked cwnd
 * route metric, TCP_BPF_SNDCWND_CLAMP), as the kernel's congestion controls
 * and BBR keep it, and at least 1. The rule's own window (st->cwnd) is not
 * cut: like BBR's target it stays what the path allows.
 */
static __always_inline __u32 cap_cwnd(__u32 cwnd, __u32 clamp)
{
	if (cwnd > clamp)
		cwnd = clamp;
	return cwnd < 1 ? 1 : cwnd;
}

SEC("struct_ops")
void BPF_PROG(bpf_hera_init, struct sock *sk)
{
	struct hera_params p;
	struct hera_state *st;

	st = bpf_sk_storage_get(&hera_sk, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!st)
		return;
	load_params(&p);
	hera_init(st, &p);
	tcp_sk_of(sk)->snd_cwnd = cap_cwnd(st->cwnd, tcp_sk_of(sk)->snd_cwnd_clamp);
	/* Internal TCP pacing (no fq qdisc here): 1.2·cwnd/srtt, like BBR asks for. */
	if (p_pacing && sk->sk_pacing_status == 0 /* SK_PACING_NONE */)
		sk->sk_pacing_status = 1; /* SK_PACING_NEEDED */
}

/*
 * A congestion control with cong_control sets the pacing rate itself (the
 * kernel's tcp_update_pacing_rate only runs for the others): the window
 * per smoothed RTT, times 2 in slow start and 1.2 otherwise, the kernel's
 * default ratios, and at most the socket's SO_MAX_PACING_RATE, as there.
 * Until the first RTT sample the rate stays unlimited.
 */
static __always_inline void set_pacing_rate(struct sock *sk, struct tcp_sock *tp, __u32 cwnd,
					    __u32 slow_start, __u32 min_rtt)
{
	__u64 srtt_us = tp->srtt_us >> 3, cap;

	/* After an outage srtt stays inflated for many ACKs, and a rate over
	 * srtt sends too few packets to bring it down: bound the divisor by
	 * p_pacing_max_rtts minimum RTTs (hera.Params.PacingMaxRTTs). */
	cap = (__u64)p_pacing_max_rtts * min_rtt;
	if (cap > 0 && cap < srtt_us)
		srtt_us = cap;
	if (srtt_us == 0)
		return;
	sk->sk_pacing_rate = hera_pacing_rate(cwnd, tp->mss_cache, srtt_us, slow_start, sk->sk_max_pacing_rate);
}

SEC("struct_ops")
void BPF_PROG(bpf_hera_cong_control, struct sock *sk, __u32 ack, int flag, const struct rate_sample *rs)
{
	struct tcp_sock *tp = tcp_sk_of(sk);
	struct hera_params p;
	struct hera_state *st;
	struct hera_path *hp;
	__u32 cwnd, min_rtt;

	st = bpf_sk_storage_get(&hera_sk, sk, 0, 0);
	if (!st)
		return;
	load_params(&p);
	hp = p.variant == HERA_TUNED ? path_of(sk) : 0;
	cwnd = hera_on_ack(st, &p, hp, tp->tcp_mstamp, rs->rtt_us, rs->acked_sacked);
	cwnd = cap_cwnd(cwnd, tp->snd_cwnd_clamp);
	tp->snd_cwnd = cwnd;
	if (p_pacing) {
		/* hera-paper keeps no minimum RTT (0): it paces over srtt */
		min_rtt = st->min.min;
		if (hp && hp->min.min != 0 && hp->min.min < min_rtt)
			min_rtt = hp->min.min;
		set_pacing_rate(sk, tp, cwnd, st->slow_start, min_rtt);
	}
}

SEC("struct_ops")
__u32 BPF_PROG(bpf_hera_ssthresh, struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk_of(sk);
	struct hera_params p;
	struct hera_state *st;
	__u32 half = tp->snd_cwnd >> 1;
	__u32 clamp = tp->snd_cwnd_clamp;

	st = bpf_sk_storage_get(&hera_sk, sk, 0, 0);
	if (!st)
		return half > 2 ? half : 2;
	load_params(&p);
	if (p.variant != HERA_TUNED)
		return half > 2 ? half : 2;
	return cap_cwnd(hera_on_loss(st, &p), clamp);
}

SEC("struct_ops")
__u32 BPF_PROG(bpf_hera_undo_cwnd, struct sock *sk)
{
	/* Read the socket's window before the branch: the verifier rejects one
	 * load instruction used for both the socket and the map value. */
	__u32 cur = tcp_sk_of(sk)->snd_cwnd;
	__u32 clamp = tcp_sk_of(sk)->snd_cwnd_clamp;
	struct hera_state *st = bpf_sk_storage_get(&hera_sk, sk, 0, 0);
	struct hera_params p;
	__u32 mine;

	if (!st)
		return cur;
	/* The kernel found the loss spurious (timestamps, DSACK, F-RTO): hera
	 * restores the window and delivered-BDP maximum its loss response cut. */
	load_params(&p);
	mine = cap_cwnd(hera_on_undo(st, &p), clamp);
	barrier_var(mine);
	return mine;
}

SEC("struct_ops")
void BPF_PROG(bpf_hera_release, struct sock *sk)
{
	bpf_sk_storage_delete(&hera_sk, sk);
}

SEC(".struct_ops.link")
struct tcp_congestion_ops hera_ops = {
	.init = (void *)bpf_hera_init,
	.cong_control = (void *)bpf_hera_cong_control,
	.ssthresh = (void *)bpf_hera_ssthresh,
	.undo_cwnd = (void *)bpf_hera_undo_cwnd,
	.release = (void *)bpf_hera_release,
	.flags = 0x1, /* TCP_CONG_NON_RESTRICTED, not in BTF */
#if HERA_VARIANT == HERA_TUNED
	.name = "hera",
#else
	.name = "hera_paper", /* the kernel allows only [A-Za-z0-9_.] */
#endif
};
