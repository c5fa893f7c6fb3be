// Unit tests of the warning caps (web/src/warncap.ts) that the bus, the
// renderer and the point-cloud view share.
import { describe, expect, it } from 'vitest';
import { WarningCap, capStep } from '../src/warncap';

describe('capStep', () => {
  const cases: { full: number; want: Record<string, number[]> }[] = [
    { full: 5, want: { full: [1, 2, 3, 4], last: [5], count: [10, 100, 1000, 10_000] } },
    { full: 1, want: { full: [], last: [1], count: [10, 100, 1000, 10_000] } },
    { full: 20, want: { full: [...Array.from({ length: 19 }, (_, i) => i + 1)], last: [20], count: [100, 1000, 10_000] } },
  ];
  for (const c of cases) {
    it(`the first ${c.full} in full, then the powers of ten`, () => {
      const got: Record<string, number[]> = { full: [], last: [], count: [] };
      for (let n = 1; n <= 10_000; n++) {
        const step = capStep(n, c.full);
        if (step !== 'quiet') got[step].push(n);
      }
      expect(got).toEqual(c.want);
    });
  }
});

describe('WarningCap', () => {
  it('logs five warnings in full, then a count of the others at most once per interval', () => {
    const cap = new WarningCap('point-cloud warnings', 5, 10_000);
    const logged = Array.from({ length: 105 }, (_, i) => cap.warn(`bad ${i + 1}`));
    expect(logged.slice(0, 4)).toEqual(['bad 1', 'bad 2', 'bad 3', 'bad 4']);
    expect(logged[4]).toBe('bad 5 (more point-cloud warnings are counted, and their number logged at most every 10 s)');
    expect(logged.slice(5).every((l) => l === null)).toBe(true);
    // [what, warnings before, now (ms, the view's clock), the line summary gives]
    const steps: [string, number, number, string | null][] = [
      ['the count of those after the fifth', 0, 1_000, '100 more point-cloud warnings suppressed; the last: bad 105'],
      ['none since', 0, 3_000, null],
      ['more, too soon after the last count', 2, 5_000, null],
      ['more, once the interval passed: all since the last count', 1, 11_000, '3 more point-cloud warnings suppressed; the last: bad 108'],
      ['none since', 0, 30_000, null],
      ['more, too soon, but at the end (Infinity): all since the last count', 2, Infinity, '2 more point-cloud warnings suppressed; the last: bad 110'],
    ];
    let n = 105;
    for (const [what, more, now, want] of steps) {
      for (let i = 0; i < more; i++) expect(cap.warn(`bad ${++n}`), what).toBeNull();
      expect(cap.summary(now), what).toBe(want);
    }
  });
  it('counts nothing while under the cap', () => {
    const cap = new WarningCap('point-cloud warnings');
    expect(cap.warn('one')).toBe('one');
    expect(cap.summary(0)).toBeNull();
  });
});
