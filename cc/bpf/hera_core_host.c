/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Host harness for hera_core.h, used by cc/core_test.go. Reads commands on
 * stdin and prints the window after each:
 *   P variant bucket_us backlog buckets delta_max hist_cap min max init shift beta window_us
 *   A now_us rtt_us acked
 *   L
 */
#include <stdint.h>
#include <stdio.h>

typedef uint32_t __u32;
typedef uint64_t __u64;
typedef int64_t __s64;
#define HERA_INLINE inline

#include "hera_core.h"

int main(void)
{
	struct hera_params p = {0};
	struct hera_state st = {0};
	char cmd[2];
	unsigned long long now, win;
	long long rtt;
	unsigned acked;

	while (scanf("%1s", cmd) == 1) {
		switch (cmd[0]) {
		case 'P':
			if (scanf("%u %u %u %u %u %u %u %u %u %u %u %llu", &p.variant, &p.bucket_us,
				  &p.backlog, &p.buckets, &p.delta_max, &p.hist_cap, &p.min_cwnd,
				  &p.max_cwnd, &p.init_cwnd, &p.decrease_shift,
				  &p.loss_beta_permille, &win) != 12)
				return 2;
			p.min_rtt_window_us = win;
			hera_init(&st, &p);
			printf("%u\n", st.cwnd);
			break;
		case 'A':
			if (scanf("%llu %lld %u", &now, &rtt, &acked) != 3)
				return 2;
			printf("%u\n", hera_on_ack(&st, &p, now, rtt, acked));
			break;
		case 'L':
			printf("%u\n", hera_on_loss(&st, &p));
			break;
		default:
			return 2;
		}
	}
	return 0;
}
