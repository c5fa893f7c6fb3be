/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * hera_core.h - the Hera update rule in C, step for step the same as the Go
 * specification in hera/hera.go. It has no kernel dependencies so that it
 * can be compiled both into the eBPF congestion control (hera.bpf.c) and for
 * the host, where cc/core_test.go replays hera/testdata/vectors.json on it.
 *
 * Every loop has a constant bound and every array index is masked, as the
 * BPF verifier requires. The includer defines __u32, __u64, __s64 and
 * HERA_INLINE.
 */
#ifndef HERA_CORE_H
#define HERA_CORE_H

#define HERA_MAX_BACKLOG 32 /* hera.MaxBacklog, a power of two */
#define HERA_MAX_BUCKETS 32 /* hera.MaxBuckets, a power of two */
#define HERA_MAX_VALID_RTT_US 60000000LL
#define HERA_BUCKET_PACKETS_MAX_WIDTHS 6 /* hera.BucketPacketsMaxWidths */

#define HERA_PAPER 0
#define HERA_TUNED 1

struct hera_params {
	__u32 variant;
	__u32 bucket_us;
	__u32 backlog;
	__u32 buckets;
	__u32 delta_max;
	__u32 hist_cap;
	__u32 min_cwnd;
	__u32 max_cwnd;
	__u32 init_cwnd;
	__u32 decrease_shift;
	__u32 loss_beta_permille;
	__u32 floor_gain_eighths;
	__u32 bucket_packets;
	__u32 gate_rtts;
	__u32 outage_rtts;
	__u32 outage_boost_percent;
	__u64 min_rtt_window_us;
	__u64 bdp_window_us;
};

/* A windowed minimum RTT (hera.minFilter). */
struct hera_min {
	__u32 min; /* µs, 0 = none */
	__u32 cand;
	__u64 stamp;
};

/* A windowed maximum of delivered-BDP samples (hera.maxFilter). */
struct hera_max {
	__u32 max; /* segments */
	__u32 cand;
	__u64 stamp;
};

/* State shared by the flows of one path (hera.Path). */
struct hera_path {
	struct hera_min min;
};

struct hera_state {
	__u32 backlog[HERA_MAX_BACKLOG];
	__u32 hist[HERA_MAX_BUCKETS];
	__u64 sum;
	struct hera_min min;
	__u64 next_at;
	__u32 head;
	__u32 n;
	__u32 cwnd;
	__u32 slow_start;
	__u32 last_bucket;
	__u32 round_min;
	/* delivered-BDP floor (hera.Flow.sampleBDP) */
	__u64 round_start;
	__u32 round_acked;
	__u32 rounds;
	struct hera_max bdp;
	/* state before the last loss, restored by hera_on_undo; undo_cwnd
	 * 0 = nothing to undo */
	__u32 undo_cwnd;
	__u32 undo_bdp;
	__u32 undo_cand;
	__u32 in_outage; /* the outage boost was applied, no short sample since */
};

static HERA_INLINE __u32 hera_clamp(__u32 v, __u32 lo, __u32 hi)
{
	if (v > hi)
		v = hi;
	if (v < lo)
		v = lo;
	return v;
}

static HERA_INLINE __u32 hera_sat_add(__u32 a, __u32 b)
{
	__u32 s = a + b;
	return s < a ? 0xffffffffu : s;
}

/* hera_pacing_rate is the pacing rate, in bytes a second, for a window of
 * cwnd segments of mss bytes over srtt_us (not 0): twice the window a round
 * trip in slow start, 6/5 of it after, at most max. cwnd * mss * 1e6 can
 * pass 64 bits (a window above about 2.8e8 segments of a loopback MSS), so
 * it divides first and saturates at max rather than wrap. */
static HERA_INLINE __u64 hera_pacing_rate(__u32 cwnd, __u32 mss, __u64 srtt_us, __u32 slow_start,
					  __u64 max)
{
	__u64 bytes = (__u64)cwnd * mss, rate, frac;

	if (bytes / srtt_us > max / 1000000ULL)
		return max;
	rate = bytes / srtt_us * 1000000ULL;
	frac = bytes % srtt_us * 1000000ULL / srtt_us;
	rate = rate > max - frac ? max : rate + frac;
	if (slow_start)
		return rate > max / 2 ? max : rate * 2;
	return rate > max - rate / 5 ? max : rate + rate / 5;
}

static HERA_INLINE void hera_init(struct hera_state *st, const struct hera_params *p)
{
	__u32 i;

	for (i = 0; i < HERA_MAX_BACKLOG; i++)
		st->backlog[i] = 0;
	for (i = 0; i < HERA_MAX_BUCKETS; i++)
		st->hist[i] = 0;
	st->sum = 0;
	st->min.min = 0;
	st->min.cand = 0;
	st->min.stamp = 0;
	st->next_at = 0;
	st->head = 0;
	st->n = 0;
	st->cwnd = p->init_cwnd;
	st->slow_start = p->variant == HERA_TUNED;
	st->last_bucket = 0xffffffffu;
	st->round_min = 0;
	st->round_start = 0;
	st->round_acked = 0;
	st->rounds = 0;
	st->bdp.max = 0;
	st->bdp.cand = 0;
	st->bdp.stamp = 0;
	st->undo_cwnd = 0;
	st->undo_bdp = 0;
	st->undo_cand = 0;
	st->in_outage = 0;
}

/*
 * hera_min_update is hera.(*minFilter).update. A time before the stamp (a
 * flow that read its clock before another flow of the path updated it) is
 * taken as the stamp: the window has not expired.
 */
static HERA_INLINE void hera_min_update(struct hera_min *m, __u64 now_us, __u32 r, __u64 win_us)
{
	if (now_us < m->stamp)
		now_us = m->stamp;
	if (m->cand == 0 || r < m->cand)
		m->cand = r;
	if (m->min == 0 || r <= m->min) {
		m->min = r;
		m->stamp = now_us;
	} else if (now_us - m->stamp > win_us) {
		m->min = m->cand;
		m->stamp = now_us;
		m->cand = r;
	}
}

/* hera_max_update is hera.(*maxFilter).update. */
static HERA_INLINE void hera_max_update(struct hera_max *m, __u64 now_us, __u32 v, __u64 win_us)
{
	if (now_us < m->stamp)
		now_us = m->stamp;
	if (v > m->cand)
		m->cand = v;
	if (v >= m->max) {
		m->max = v;
		m->stamp = now_us;
	} else if (now_us - m->stamp > win_us) {
		m->max = m->cand;
		m->stamp = now_us;
		m->cand = v;
	}
}

/* hera_sample_bdp is hera.(*Flow).sampleBDP. */
static HERA_INLINE void hera_sample_bdp(struct hera_state *st, const struct hera_params *p,
					__u64 now_us, __u32 min_rtt)
{
	__u64 bdp;

	if (st->rounds > 0 && now_us > st->round_start) {
		bdp = (__u64)st->round_acked * min_rtt / (now_us - st->round_start);
		if (bdp > 0x80000000ULL)
			bdp = 0x80000000ULL;
		hera_max_update(&st->bdp, now_us, (__u32)bdp, p->bdp_window_us);
	}
	st->round_start = now_us;
	st->round_acked = 0;
	st->rounds = 1;
}

/*
 * hera_on_ack is hera.(*Flow).OnAck. path is the state shared with the
 * other flows of the same path (hera.Path), or NULL; the Paper variant
 * ignores it. Updates of path from several CPUs may race: each field is
 * written whole, and the worst outcome is a minimum missed for one sample.
 */
static HERA_INLINE __u32 hera_on_ack(struct hera_state *st, const struct hera_params *p,
				     struct hera_path *path, __u64 now_us, __s64 rtt_us,
				     __u32 acked)
{
	int valid = rtt_us > 0 && rtt_us <= HERA_MAX_VALID_RTT_US, boost = 0, long_sample;
	__u32 r = (__u32)rtt_us, mean, x, half, b, i, idx, min_rtt, prev;
	__u64 v, q, total = 0, cum = 0, step, num, den, floor, cap, bw, gate;

	if (p->variant != HERA_TUNED)
		path = 0;
	if (valid && p->variant == HERA_TUNED) {
		hera_min_update(&st->min, now_us, r, p->min_rtt_window_us);
		if (path)
			hera_min_update(&path->min, now_us, r, p->min_rtt_window_us);
	}
	min_rtt = st->min.min;
	if (path && path->min.min != 0 && path->min.min < min_rtt)
		min_rtt = path->min.min;
	if (p->variant == HERA_TUNED)
		st->round_acked = hera_sat_add(st->round_acked, acked);
	if (st->slow_start) {
		st->cwnd = hera_clamp(hera_sat_add(st->cwnd, acked), p->min_cwnd, p->max_cwnd);
		if (valid && (__u64)r - (__u64)min_rtt >=
				     (__u64)p->bucket_us * (p->buckets / 2) / 2)
			st->slow_start = 0;
	}
	if (valid && p->variant == HERA_TUNED && (st->round_min == 0 || r < st->round_min))
		st->round_min = r;
	if (!valid || now_us < st->next_at)
		return st->cwnd;
	if (p->backlog == 0 || p->bucket_us == 0 || p->buckets < 2)
		return st->cwnd;

	st->next_at = now_us + r;
	if (p->variant == HERA_TUNED && p->gate_rtts > 0 && min_rtt > 0) {
		/* hera.Params.GateRTTs: an outage's long sample does not hold
		 * the next update back for as long */
		gate = (__u64)p->gate_rtts * min_rtt;
		if (gate < r)
			st->next_at = now_us + gate;
	}
	if (p->variant == HERA_TUNED) {
		/* push the round's smallest sample (see hera.go) */
		r = st->round_min;
		st->round_min = 0;
		if (p->floor_gain_eighths > 0)
			hera_sample_bdp(st, p, now_us, min_rtt);
	}
	/* hera.Params.OutageRTTs: the gate's own sample (not the round's
	 * minimum, whose earlier samples precede the outage) */
	if (p->variant == HERA_TUNED && p->outage_rtts > 0 && p->outage_boost_percent > 0 &&
	    min_rtt > 0) {
		long_sample = (__u64)(__u32)rtt_us - (__u64)min_rtt >=
			      (__u64)p->outage_rtts * min_rtt;
		boost = long_sample && !st->in_outage;
		st->in_outage = long_sample;
	}
	/* push into the ring of exactly p->backlog slots */
	idx = st->head & (HERA_MAX_BACKLOG - 1);
	if (st->n >= p->backlog)
		st->sum -= st->backlog[idx];
	else
		st->n++;
	st->backlog[idx] = r;
	st->sum += r;
	st->head = st->head + 1 >= p->backlog ? 0 : st->head + 1;

	mean = (__u32)(st->sum / st->n);
	v = mean;
	if (p->variant == HERA_TUNED)
		v = mean > min_rtt ? mean - min_rtt : 0;
	x = p->buckets;
	if (x > HERA_MAX_BUCKETS)
		x = HERA_MAX_BUCKETS;
	b = x - 1;
	/* hera.Params.BucketPackets: at least that many packet times at the
	 * delivered rate per bucket */
	bw = p->bucket_us;
	if (p->variant == HERA_TUNED && p->bucket_packets > 0 && st->bdp.max > 0) {
		q = (__u64)p->bucket_packets * min_rtt / st->bdp.max;
		if (q > HERA_BUCKET_PACKETS_MAX_WIDTHS * bw)
			q = HERA_BUCKET_PACKETS_MAX_WIDTHS * bw;
		if (q > bw)
			bw = q;
	}
	q = v / bw;
	if (q < (__u64)(x - 1))
		b = (__u32)q;
	b &= HERA_MAX_BUCKETS - 1;
	st->last_bucket = b;
	st->hist[b]++;
	for (i = 0; i < HERA_MAX_BUCKETS; i++) {
		if (i >= x)
			break;
		total += st->hist[i];
		if (i <= b)
			cum += st->hist[i];
	}
	if (!st->slow_start) {
		half = x / 2;
		prev = st->cwnd;
		if (b < half) {
			step = cum * (half - b) * p->delta_max / total;
			if (step > 0x80000000ULL)
				step = 0x80000000ULL;
			st->cwnd = hera_sat_add(st->cwnd, (__u32)step);
		} else {
			/* tuned: unit = delta_max + cwnd / 2^shift, multiplied out */
			num = p->delta_max;
			den = total;
			if (p->variant == HERA_TUNED && p->decrease_shift > 0 && p->decrease_shift < 32) {
				num = ((__u64)p->delta_max << p->decrease_shift) + st->cwnd;
				den = total << p->decrease_shift;
			}
			step = cum * (b - half + 1) * num / den;
			if (step >= st->cwnd)
				st->cwnd = 0;
			else
				st->cwnd -= (__u32)step;
		}
		if (p->variant == HERA_TUNED && p->floor_gain_eighths > 0) {
			/* hera.(*Flow).applyFloor: a decrease may still go below the
			 * floor by prev >> (shift + 1), so shared-queue flows converge */
			floor = (__u64)st->bdp.max * p->floor_gain_eighths / 8;
			if (b >= half && p->decrease_shift > 0) {
				cap = p->decrease_shift >= 31 ? prev :
					prev - (prev >> (p->decrease_shift + 1));
				if (floor > cap)
					floor = cap;
			}
			if (st->cwnd < floor)
				st->cwnd = floor > 0x80000000ULL ? 0x80000000u : (__u32)floor;
		}
		st->cwnd = hera_clamp(st->cwnd, p->min_cwnd, p->max_cwnd);
	}
	if (boost && !st->slow_start) {
		step = (__u64)st->cwnd * p->outage_boost_percent / 100;
		if (step > 0x80000000ULL)
			step = 0x80000000ULL;
		st->cwnd = hera_clamp((__u32)step, p->min_cwnd, p->max_cwnd);
	}
	if (total >= p->hist_cap) {
		for (i = 0; i < HERA_MAX_BUCKETS; i++)
			st->hist[i] >>= 1;
	}
	return st->cwnd;
}

/* hera_on_loss is hera.(*Flow).OnLoss. */
static HERA_INLINE __u32 hera_on_loss(struct hera_state *st, const struct hera_params *p)
{
	if (p->variant != HERA_TUNED)
		return st->cwnd;
	st->slow_start = 0;
	st->undo_cwnd = st->cwnd;
	st->undo_bdp = st->bdp.max;
	st->undo_cand = st->bdp.cand;
	if (p->loss_beta_permille > 0)
		st->cwnd = hera_clamp((__u32)((__u64)st->cwnd * p->loss_beta_permille / 1000),
				      p->min_cwnd, p->max_cwnd);
	/* a loss says the link did not carry what the floor remembers */
	if (st->bdp.max > st->cwnd)
		st->bdp.max = st->cwnd;
	if (st->bdp.cand > st->cwnd)
		st->bdp.cand = st->cwnd;
	return st->cwnd;
}

/* hera_on_undo is hera.(*Flow).OnUndo: the kernel found the last loss
 * spurious; restore the window and the delivered-BDP maximum it reduced. */
static HERA_INLINE __u32 hera_on_undo(struct hera_state *st, const struct hera_params *p)
{
	__u32 c;

	if (p->variant != HERA_TUNED || st->undo_cwnd == 0)
		return st->cwnd;
	c = hera_clamp(st->undo_cwnd, p->min_cwnd, p->max_cwnd);
	if (c > st->cwnd)
		st->cwnd = c;
	if (st->undo_bdp > st->bdp.max)
		st->bdp.max = st->undo_bdp;
	if (st->undo_cand > st->bdp.cand)
		st->bdp.cand = st->undo_cand;
	st->undo_cwnd = 0;
	st->undo_bdp = 0;
	st->undo_cand = 0;
	return st->cwnd;
}

#endif /* HERA_CORE_H */
