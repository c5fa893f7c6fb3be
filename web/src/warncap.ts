// Caps warnings that can come by the thousand (invalid bus messages,
// objects nested too deep, bad point-cloud fragments), so that one client
// cannot flood the console: the first few are logged in full, the last of
// them saying where the others go, and the others only counted.

/**
 * What to log of the nth warning of a kind (n from 1), the first `full`
 * in full: 'full' for those before the last, 'last' for the last of them
 * (which says that more are counted), 'count' for one more at a power of
 * ten (10, 100, 1000 … : log the count and the last one), and 'quiet'
 * for the others.
 */
export function capStep(n: number, full: number): 'full' | 'last' | 'count' | 'quiet' {
  if (n < full) return 'full';
  if (n === full) return 'last';
  return powerOfTen(n) ? 'count' : 'quiet';
}

function powerOfTen(n: number): boolean {
  let p = 10;
  while (p < n) p *= 10;
  return p === n;
}

/**
 * Caps warnings that come steadily (a publisher sending bad or
 * undecodable fragments): the first `full` are logged in full (capStep);
 * the ones after them are counted, and summary() gives one line saying
 * how many more there were, at most once every intervalMs.
 */
export class WarningCap {
  private count = 0;
  private suppressed = 0;
  private last = '';
  private lastSummary = -Infinity;

  constructor(readonly what: string, readonly full = 5, readonly intervalMs = 10_000) {}

  /** A warning: the line to log now, or null when it is only counted. */
  warn(line: string): string | null {
    switch (capStep(++this.count, this.full)) {
      case 'full':
        return line;
      case 'last':
        return `${line} (more ${this.what} are counted, and their number logged at most every ${this.intervalMs / 1000} s)`;
    }
    this.suppressed++;
    this.last = line;
    return null;
  }

  /**
   * The line saying how many warnings were counted since the last one, or
   * null: none were, or it is too soon (now in ms; Infinity is never too
   * soon, for a last count when the warnings end).
   */
  summary(now: number): string | null {
    if (this.suppressed === 0 || now - this.lastSummary < this.intervalMs) return null;
    const line = `${this.suppressed} more ${this.what} suppressed; the last: ${this.last}`;
    this.suppressed = 0;
    this.lastSummary = now;
    return line;
  }
}
