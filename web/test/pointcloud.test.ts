// Unit tests of the point-cloud receive path (web/src/pointcloud.ts): wire
// format, reassembly with a deadline, the frame merge, and Draco decoding
// with the real draco3d WASM decoder of a cloud encoded by Google Draco's
// draco_encoder (skipped, saying so, when the tool is missing).
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { DracoDecoder, FrameMerger, HEADER_SIZE, PREFIX_SIZE, Reassembler, newer, parseMessage, seqGap, type Points } from '../src/pointcloud';

/** One data-channel message as the SFU sends it (sfu/datachannel.go + volumetric.Header). */
function message(o: { slot?: number; marker?: boolean; seq?: number; desc?: number; client?: number; frame: number; fragment: number; count: number; captureUs?: number; data: number[] }): Uint8Array {
  const b = new Uint8Array(PREFIX_SIZE + HEADER_SIZE + o.data.length);
  const v = new DataView(b.buffer);
  b[0] = o.slot ?? 0;
  b[1] = o.marker ? 1 : 0;
  v.setUint16(2, o.seq ?? 0);
  const h = PREFIX_SIZE;
  b[h] = 1;
  b[h + 1] = o.desc ?? 0;
  v.setUint32(h + 2, o.client ?? 7);
  v.setUint32(h + 6, o.frame);
  v.setUint16(h + 10, o.fragment);
  v.setUint16(h + 12, o.count);
  v.setBigUint64(h + 14, BigInt(o.captureUs ?? 123456789));
  b.set(o.data, h + HEADER_SIZE);
  return b;
}

describe('parseMessage', () => {
  it('reads the prefix and the fragment header', () => {
    const f = parseMessage(message({ slot: 5, marker: true, seq: 0xfffe, desc: 2, client: 0x01020304, frame: 99, fragment: 1, count: 3, captureUs: 2 ** 40, data: [1, 2, 3] }));
    expect(f).toMatchObject({ slot: 5, marker: true, seq: 0xfffe, desc: 2, client: 0x01020304, frame: 99, fragment: 1, count: 3, captureUs: 2 ** 40 });
    expect([...f.data]).toEqual([1, 2, 3]);
  });
  it.each([
    ['short', new Uint8Array(PREFIX_SIZE + HEADER_SIZE - 1), /shorter/],
    ['bad version', (() => { const m = message({ frame: 1, fragment: 0, count: 1, data: [] }); m[PREFIX_SIZE] = 2; return m; })(), /version/],
    ['fragment past count', message({ frame: 1, fragment: 3, count: 3, data: [] }), /fragment 3 of 3/],
    ['zero count', message({ frame: 1, fragment: 0, count: 0, data: [] }), /fragment 0 of 0/],
    ['description 3', message({ desc: 3, frame: 1, fragment: 0, count: 1, data: [] }), /description 3/],
  ])('refuses %s', (_n, m, re) => {
    expect(() => parseMessage(m)).toThrow(re);
  });
});

describe('Reassembler', () => {
  it('rebuilds a description from fragments in any order, once', () => {
    const r = new Reassembler(500);
    const frags = [[0, [1, 2]], [2, [5]], [1, [3, 4]]] as const;
    let out = null;
    for (const [i, d] of frags) {
      expect(out).toBeNull();
      out = r.push('alice', parseMessage(message({ frame: 10, fragment: i, count: 3, data: [...d] })), 0);
    }
    expect(out).toMatchObject({ publisher: 'alice', desc: 0, frame: 10 });
    expect([...out!.data]).toEqual([1, 2, 3, 4, 5]);
    // a duplicate of a finished description does not complete it again
    expect(r.push('alice', parseMessage(message({ frame: 10, fragment: 0, count: 3, data: [1, 2] })), 1)).toBeNull();
    expect(r.complete).toBe(1);
  });
  it('keeps publishers and descriptions apart', () => {
    const r = new Reassembler(500);
    expect(r.push('alice', parseMessage(message({ desc: 0, frame: 1, fragment: 0, count: 2, data: [1] })), 0)).toBeNull();
    expect(r.push('bob', parseMessage(message({ desc: 0, frame: 1, fragment: 1, count: 2, data: [2] })), 0)).toBeNull();
    expect(r.push('alice', parseMessage(message({ desc: 1, frame: 1, fragment: 1, count: 2, data: [2] })), 0)).toBeNull();
    expect(r.pending).toBe(3);
  });
  it('drops an incomplete description after the deadline', () => {
    const r = new Reassembler(500);
    r.push('alice', parseMessage(message({ frame: 1, fragment: 0, count: 2, data: [1] })), 0);
    expect(r.expire(400)).toBe(0);
    expect(r.expire(501)).toBe(1);
    expect(r.expired).toBe(1);
    // the missing fragment comes too late: it starts a new partial that never completes
    expect(r.push('alice', parseMessage(message({ frame: 1, fragment: 1, count: 2, data: [2] })), 600)).toBeNull();
  });
  it('ignores fragments of frames older than the newest complete one', () => {
    const r = new Reassembler(500);
    expect(r.push('alice', parseMessage(message({ frame: 5, fragment: 0, count: 1, data: [5] })), 0)).not.toBeNull();
    expect(r.push('alice', parseMessage(message({ frame: 4, fragment: 0, count: 1, data: [4] })), 0)).toBeNull();
    expect(r.push('alice', parseMessage(message({ frame: 6, fragment: 0, count: 1, data: [6] })), 0)).not.toBeNull();
  });
  it('orders frame numbers across the uint32 wrap', () => {
    expect(newer(0, 0xffffffff)).toBe(true);
    expect(newer(0xffffffff, 0)).toBe(false);
    expect(newer(3, 3)).toBe(false);
  });
});

describe('seqGap', () => {
  it('counts holes that reordering does not fill', () => {
    const h = new Map<number, number>();
    const gaps = (seqs: number[], slot = 0) => seqs.reduce((g, s) => g + seqGap(h, slot, s), 0);
    expect(gaps([10, 11, 13, 12, 14])).toBe(0); // reordered, nothing lost
    expect(gaps([17])).toBe(2); // 15 and 16 missing
    expect(gaps([0xffff, 0, 1], 1)).toBe(0); // wraps
    expect(gaps([3], 1)).toBe(1);
    expect(gaps([3], 1)).toBe(0); // duplicate
  });
});

const pts = (n: number, v: number): Points => ({ positions: new Float32Array(n * 3).fill(v), colors: null, count: n });

describe('FrameMerger', () => {
  it('merges the descriptions of the newest frame and remembers the last full one', () => {
    const m = new FrameMerger();
    expect(m.add(1, 0, pts(15, 0))).toBe(true);
    expect(m.add(1, 2, pts(60, 2))).toBe(true);
    expect(m.add(1, 1, pts(25, 1))).toBe(true);
    expect(m.count).toBe(100);
    const pos = new Float32Array(300), col = new Float32Array(300);
    expect(m.merge(pos, col)).toBe(100);
    expect(pos[15 * 3]).toBe(1); // descriptions in order 0, 1, 2
    expect(pos[40 * 3]).toBe(2);
    expect(col[0]).toBe(1); // white without colours
    expect(m.add(0, 0, pts(15, 0))).toBe(false); // older frame
    expect(m.add(2, 0, pts(15, 0))).toBe(true);
    expect(m.count).toBe(15);
    expect(m.lastFramePoints).toBe(100);
    expect(m.lastFrameDescs).toBe(3);
    expect(m.framesShown).toBe(2);
  });
});

function hasDraco(): boolean {
  try {
    execFileSync('draco_encoder', ['--help'], { stdio: 'ignore' });
    return true;
  } catch (e) {
    return (e as { code?: string }).code !== 'ENOENT';
  }
}

describe('DracoDecoder', () => {
  const draco = hasDraco();
  if (!draco) console.warn('[web tests] skipping the Draco decode test: draco_encoder is missing (Debian package draco; scripts/setup-sfu.sh)');
  it.skipIf(!draco)('decodes a point cloud encoded by draco_encoder (11-bit positions, colours)', async () => {
    const n = 500;
    const lines = ['ply', 'format ascii 1.0', `element vertex ${n}`, 'property float x', 'property float y', 'property float z',
      'property uchar red', 'property uchar green', 'property uchar blue', 'end_header'];
    for (let i = 0; i < n; i++) lines.push(`${(i % 10) * 0.1} ${Math.floor(i / 10) * 0.03} ${(i % 7) * 0.05} ${i % 256} 128 ${255 - (i % 256)}`);
    const dir = mkdtempSync(join(tmpdir(), 'xrealm-draco-'));
    try {
      writeFileSync(join(dir, 'c.ply'), lines.join('\n') + '\n');
      execFileSync('draco_encoder', ['-point_cloud', '-qp', '11', '-i', join(dir, 'c.ply'), '-o', join(dir, 'c.drc')], { stdio: 'ignore' });
      const require = createRequire(import.meta.url);
      const wasmBinary = readFileSync(require.resolve('draco3d/draco_decoder.wasm'));
      const dec = await DracoDecoder.load({ wasmBinary });
      const p = dec.decode(new Uint8Array(readFileSync(join(dir, 'c.drc'))));
      expect(p.count).toBe(n);
      let maxX = 0, maxY = 0;
      for (let i = 0; i < n; i++) {
        maxX = Math.max(maxX, p.positions[i * 3]);
        maxY = Math.max(maxY, p.positions[i * 3 + 1]);
      }
      expect(maxX).toBeCloseTo(0.9, 2);
      expect(maxY).toBeCloseTo(1.47, 2);
      expect(p.colors).not.toBeNull();
      expect(p.colors![1]).toBeCloseTo(128 / 255, 3);
      expect(() => dec.decode(new Uint8Array([1, 2, 3, 4, 5, 6, 7, 8, 9]))).toThrow(/draco/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
