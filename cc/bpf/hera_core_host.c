/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Host harness for hera_core.h, used by cc/core_test.go. Reads commands on
 * stdin and prints the window after each:
 *   P variant bucket_us backlog buckets delta_max hist_cap min max init shift beta window_us
 *     floor_gain bdp_window_us bucket_packets gate_rtts outage_rtts outage_boost_percent shared
 *   A flow now_us rtt_us acked
 *   L flow
 *   U flow  (undo)
 *   W window_us  (fresh standalone filters; prints 0)
 *   m now_us v  (the min filter's value after sample v)
 *   x now_us v  (the max filter's value after sample v)
 *   R cwnd mss srtt_us slow_start max  (the pacing rate)
 * P starts HOST_FLOWS fresh flows; with shared = 1 they share one path.
 */
#include <stdint.h>
#include <stdio.h>

typedef uint32_t __u32;
typedef uint64_t __u64;
typedef int64_t __s64;
#define HERA_INLINE inline

#include "hera_core.h"

#define HOST_FLOWS 8

int main(void)
{
	struct hera_params p = {0};
	struct hera_state st[HOST_FLOWS];
	struct hera_path path = {{0}};
	struct hera_path *pp = 0;
	struct hera_min fmin = {0};
	struct hera_max fmax = {0};
	unsigned long long fwin = 0;
	unsigned v;
	char cmd[2];
	unsigned long long now, win, bdp_win;
	long long rtt;
	unsigned acked, shared, flow, i;

	while (scanf("%1s", cmd) == 1) {
		switch (cmd[0]) {
		case 'P':
			if (scanf("%u %u %u %u %u %u %u %u %u %u %u %llu %u %llu %u %u %u %u %u", &p.variant,
				  &p.bucket_us, &p.backlog, &p.buckets, &p.delta_max, &p.hist_cap,
				  &p.min_cwnd, &p.max_cwnd, &p.init_cwnd, &p.decrease_shift,
				  &p.loss_beta_permille, &win, &p.floor_gain_eighths, &bdp_win,
				  &p.bucket_packets, &p.gate_rtts, &p.outage_rtts,
				  &p.outage_boost_percent, &shared) != 19)
				return 2;
			p.min_rtt_window_us = win;
			p.bdp_window_us = bdp_win;
			for (i = 0; i < HOST_FLOWS; i++)
				hera_init(&st[i], &p);
			path = (struct hera_path){{0}};
			pp = shared ? &path : 0;
			printf("%u\n", st[0].cwnd);
			break;
		case 'A':
			if (scanf("%u %llu %lld %u", &flow, &now, &rtt, &acked) != 4 || flow >= HOST_FLOWS)
				return 2;
			printf("%u\n", hera_on_ack(&st[flow], &p, pp, now, rtt, acked));
			break;
		case 'L':
			if (scanf("%u", &flow) != 1 || flow >= HOST_FLOWS)
				return 2;
			printf("%u\n", hera_on_loss(&st[flow], &p));
			break;
		case 'U':
			if (scanf("%u", &flow) != 1 || flow >= HOST_FLOWS)
				return 2;
			printf("%u\n", hera_on_undo(&st[flow], &p));
			break;
		case 'W':
			if (scanf("%llu", &fwin) != 1)
				return 2;
			fmin = (struct hera_min){0};
			fmax = (struct hera_max){0};
			printf("0\n");
			break;
		case 'm':
			if (scanf("%llu %u", &now, &v) != 2)
				return 2;
			hera_min_update(&fmin, now, v, fwin);
			printf("%u\n", fmin.min);
			break;
		case 'x':
			if (scanf("%llu %u", &now, &v) != 2)
				return 2;
			hera_max_update(&fmax, now, v, fwin);
			printf("%u\n", fmax.max);
			break;
		case 'R': {
			unsigned cw, mss, ss;
			unsigned long long srtt, max;
			if (scanf("%u %u %llu %u %llu", &cw, &mss, &srtt, &ss, &max) != 5 || srtt == 0)
				return 2;
			printf("%llu\n", (unsigned long long)hera_pacing_rate(cw, mss, srtt, ss, max));
			break;
		}
		default:
			return 2;
		}
	}
	return 0;
}
