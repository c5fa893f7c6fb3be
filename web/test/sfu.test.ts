// Unit tests of the SFU client's pure parts (web/src/sfu.ts).
import { describe, expect, it } from 'vitest';
import { BUSY_TRIES, busyRetryMs, sfuName } from '../src/sfu';

describe('busyRetryMs', () => {
  it('waits 1 s doubling to 10 s, and gives up after BUSY_TRIES refusals in a row', () => {
    const got = Array.from({ length: BUSY_TRIES + 2 }, (_, i) => busyRetryMs(i));
    expect(got).toEqual([null, 1000, 2000, 4000, 8000, ...Array(BUSY_TRIES - 4).fill(10_000), null]);
  });
  it.each([-1, 0.5, NaN, Infinity])('refuses attempt %s', (n) => {
    expect(busyRetryMs(n)).toBeNull();
  });
});

describe('sfuName', () => {
  it.each([
    ['xr-abc_1', 'xr-abc_1'],
    ['a/b c', 'a_b_c'],
    ['', '_'],
    ['x'.repeat(70), 'x'.repeat(64)],
  ])('%j → %j', (in_, want) => {
    expect(sfuName(in_)).toBe(want);
  });
});
