#!/usr/bin/env python3
"""Tables of session 19 from syscalls.sh's files: summary.py DIR LABEL...

Per run: poses sent a second (the bench's windows that end 15-26 s, which
overlap perf's 10 s from 14 s), then for the server and, where counted,
the bots: read calls a second, those that returned EAGAIN, reads per pose,
and CPU seconds in perf's 10 s (the counters' running time); the bench's
server CPU column over the held windows, and the machine's idle share."""
import csv, os, sys

def perf(fn):
    p = {}
    if not os.path.exists(fn):
        return None
    for line in open(fn):
        f = line.strip().split(',')
        if len(f) > 3 and f[0].isdigit():
            p[f[2]] = (int(f[0]), int(f[3]) / 1e9)
    return p or None

d = sys.argv[1]
for lab in sys.argv[2:]:
    rows = list(csv.DictReader(open(f'{d}/{lab}.csv')))
    w = [r for r in rows if 14 < float(r['t_s']) <= 26]
    sent = sum(float(r['sent_per_s']) for r in w) / len(w)
    hold = [r for r in rows if float(r['t_s']) > 10]
    scpu = [float(r['server_cpu']) for r in hold]
    idle = sum(float(r['idle_cpu']) for r in hold) / len(hold)
    cols = [lab, f'{sent:,.0f}']
    for who in ('perf', 'botsperf'):
        p = perf(f'{d}/{lab}-{who}.txt')
        if p is None or 'syscalls:sys_enter_read' not in p:
            cols += ['-'] * 4
            continue
        rd, cpu = p['syscalls:sys_enter_read']
        ea = p['syscalls:sys_exit_read'][0]
        cols += [f'{rd/10:,.0f}', f'{ea/10:,.0f}', f'{rd/10/sent:.2f}', f'{cpu:.2f}']
    cols += [f'{sum(scpu)/len(scpu):.2f} ({min(scpu):.2f}-{max(scpu):.2f})', f'{idle:.2f}']
    print('| ' + ' | '.join(cols) + ' |')
