// Point clouds the browser publishes: a synthetic figure (the shape of
// volumetric/pointcloud.go: a walking, slowly turning human of ellipsoids),
// its multiple-description split (15/25/60 % uniform samples) and the
// fragments sent upstream on the "pointcloud" data channel (the 4-byte
// prefix and the 22-byte fragment header of volumetric/packet.go), and the
// Draco encoder (the draco3d package's WASM encoder, 11-bit positions as the
// SFU's Go publishers use). Nothing here touches the DOM, so that it runs
// under Node in the unit tests.

import { DESCRIPTIONS, HEADER_SIZE, PREFIX_SIZE } from './pointcloud';

const HEADER_VERSION = 1;
/** Largest message (prefix, header and data): the SFU forwards it as one RTP packet. */
export const MAX_MESSAGE = 1200;
/** The paper's description shares. */
export const SHARES = [0.15, 0.25, 0.6];

interface Part {
  c: [number, number, number];
  r: [number, number, number];
  swing: number;
  pivotY: number;
  phase: number;
  weight: number;
  rgb: [number, number, number];
}

const SKIN: [number, number, number] = [224, 172, 105];
const FIGURE: Part[] = [
  { c: [0, 1.65, 0], r: [0.1, 0.12, 0.11], swing: 0, pivotY: 0, phase: 0, weight: 0.08, rgb: SKIN }, // head
  { c: [0, 1.25, 0], r: [0.2, 0.3, 0.12], swing: 0, pivotY: 0, phase: 0, weight: 0.3, rgb: [40, 90, 200] }, // torso
  { c: [-0.28, 1.15, 0], r: [0.06, 0.3, 0.06], swing: 0.5, pivotY: 1.45, phase: Math.PI, weight: 0.09, rgb: SKIN }, // left arm
  { c: [0.28, 1.15, 0], r: [0.06, 0.3, 0.06], swing: 0.5, pivotY: 1.45, phase: 0, weight: 0.09, rgb: SKIN }, // right arm
  { c: [-0.11, 0.47, 0], r: [0.08, 0.45, 0.08], swing: 0.45, pivotY: 0.92, phase: 0, weight: 0.22, rgb: [50, 50, 60] }, // left leg
  { c: [0.11, 0.47, 0], r: [0.08, 0.45, 0.08], swing: 0.45, pivotY: 0.92, phase: Math.PI, weight: 0.22, rgb: [50, 50, 60] }, // right leg
];

/** A deterministic generator of uniform numbers in [0, 1) (mulberry32). */
export function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** One frame: xyz in metres (feet at y = 0) and rgb bytes. */
export interface Cloud {
  positions: Float32Array;
  colors: Uint8Array;
  count: number;
}

/** The synthetic figure: the same seed, size and frame number give the same cloud. */
export class Figure {
  private part: Uint8Array;
  private unit: Float32Array; // a point on the unit sphere per point

  constructor(readonly points: number, readonly fps: number, seed = 1) {
    if (!(points >= DESCRIPTIONS) || !(fps > 0)) throw new Error(`figure of ${points} points at ${fps} fps: want at least ${DESCRIPTIONS} points and fps > 0`);
    const rand = rng(seed);
    const total = FIGURE.reduce((a, p) => a + p.weight, 0);
    this.part = new Uint8Array(points);
    this.unit = new Float32Array(points * 3);
    for (let i = 0; i < points; i++) {
      let x = rand() * total;
      let k = 0;
      for (; k < FIGURE.length - 1 && x >= FIGURE[k].weight; k++) x -= FIGURE[k].weight;
      const z = 2 * rand() - 1;
      const a = 2 * Math.PI * rand();
      const r = Math.sqrt(1 - z * z);
      this.part[i] = k;
      this.unit.set([r * Math.cos(a), r * Math.sin(a), z], i * 3);
    }
  }

  /** Frame n: the figure walks in place and turns slowly. */
  frame(n: number): Cloud {
    const t = n / this.fps;
    const bob = 0.02 * Math.abs(Math.sin(2 * Math.PI * t));
    const turn = 0.3 * t;
    const ct = Math.cos(turn), st = Math.sin(turn);
    const positions = new Float32Array(this.points * 3);
    const colors = new Uint8Array(this.points * 3);
    for (let i = 0; i < this.points; i++) {
      const p = FIGURE[this.part[i]];
      let x = p.c[0] + p.r[0] * this.unit[i * 3];
      let y = p.c[1] + p.r[1] * this.unit[i * 3 + 1];
      let z = p.c[2] + p.r[2] * this.unit[i * 3 + 2];
      if (p.swing !== 0) {
        const ang = p.swing * Math.sin(2 * Math.PI * t + p.phase);
        const dy = y - p.pivotY, dz = z;
        y = p.pivotY + dy * Math.cos(ang) - dz * Math.sin(ang);
        z = dy * Math.sin(ang) + dz * Math.cos(ang);
      }
      y += bob;
      positions[i * 3] = ct * x + st * z;
      positions[i * 3 + 1] = y;
      positions[i * 3 + 2] = -st * x + ct * z;
      colors.set(p.rgb, i * 3);
    }
    return { positions, colors, count: this.points };
  }
}

/**
 * Splits clouds of n points into the three descriptions by a fixed random
 * permutation: each description is a uniform sample, they are disjoint and
 * together hold every point.
 */
export class Splitter {
  private perm: Uint32Array;
  readonly bounds: number[];

  constructor(readonly points: number, seed = 2, shares = SHARES) {
    const rand = rng(seed);
    this.perm = new Uint32Array(points);
    for (let i = 0; i < points; i++) this.perm[i] = i;
    for (let i = points - 1; i > 0; i--) {
      const j = Math.floor(rand() * (i + 1));
      [this.perm[i], this.perm[j]] = [this.perm[j], this.perm[i]];
    }
    this.bounds = [0];
    let acc = 0;
    for (let d = 0; d < DESCRIPTIONS - 1; d++) {
      acc += shares[d];
      this.bounds.push(Math.round(acc * points));
    }
    this.bounds.push(points);
  }

  split(c: Cloud): Cloud[] {
    if (c.count !== this.points) throw new Error(`cloud of ${c.count} points, the splitter is for ${this.points}`);
    const out: Cloud[] = [];
    for (let d = 0; d < DESCRIPTIONS; d++) {
      const lo = this.bounds[d], n = this.bounds[d + 1] - lo;
      const positions = new Float32Array(n * 3), colors = new Uint8Array(n * 3);
      for (let i = 0; i < n; i++) {
        const j = this.perm[lo + i];
        positions.set(c.positions.subarray(j * 3, j * 3 + 3), i * 3);
        colors.set(c.colors.subarray(j * 3, j * 3 + 3), i * 3);
      }
      out.push({ positions, colors, count: n });
    }
    return out;
  }
}

/** What identifies one encoded description. */
export interface DescriptionHeader {
  desc: number;
  client: number; // the publisher's number (uint32)
  frame: number; // uint32
  captureUs: number; // the sender's clock, µs since the Unix epoch
}

/**
 * Packetizer numbers the messages of each description (the prefix's
 * sequence number, per description as on an RTP track) and cuts encoded
 * descriptions into messages of at most MAX_MESSAGE bytes.
 */
export class Packetizer {
  private seq = [0, 0, 0];

  constructor(private maxMessage = MAX_MESSAGE) {
    if (maxMessage <= PREFIX_SIZE + HEADER_SIZE) throw new Error(`messages of ${maxMessage} bytes leave no room for data`);
  }

  /** The messages of one description: prefix, header, data; the last one has the marker. */
  packetize(h: DescriptionHeader, data: Uint8Array): ArrayBuffer[] {
    if (h.desc < 0 || h.desc >= DESCRIPTIONS) throw new Error(`description ${h.desc}, want 0-${DESCRIPTIONS - 1}`);
    const room = this.maxMessage - PREFIX_SIZE - HEADER_SIZE;
    const count = Math.max(1, Math.ceil(data.length / room));
    if (count > 0xffff) throw new Error(`${data.length} bytes need ${count} fragments, more than 65535`);
    const out: ArrayBuffer[] = [];
    for (let i = 0; i < count; i++) {
      const chunk = data.subarray(i * room, Math.min((i + 1) * room, data.length));
      const buf = new ArrayBuffer(PREFIX_SIZE + HEADER_SIZE + chunk.length);
      const b = new Uint8Array(buf), v = new DataView(buf);
      b[0] = h.desc;
      b[1] = i === count - 1 ? 1 : 0;
      v.setUint16(2, this.seq[h.desc]);
      this.seq[h.desc] = (this.seq[h.desc] + 1) & 0xffff;
      const o = PREFIX_SIZE;
      b[o] = HEADER_VERSION;
      b[o + 1] = h.desc;
      v.setUint32(o + 2, h.client >>> 0);
      v.setUint32(o + 6, h.frame >>> 0);
      v.setUint16(o + 10, i);
      v.setUint16(o + 12, count);
      v.setBigUint64(o + 14, BigInt(Math.max(0, Math.round(h.captureUs))));
      b.set(chunk, o + HEADER_SIZE);
      out.push(buf);
    }
    return out;
  }
}

/** A publisher number from its SFU client id (FNV-1a): the header's client field. */
export function clientNumber(id: string): number {
  let x = 0x811c9dc5;
  for (let i = 0; i < id.length; i++) x = Math.imul(x ^ id.charCodeAt(i), 0x01000193) >>> 0;
  return x >>> 0;
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type DracoModule = any;

/** Encodes point clouds with the draco3d WASM encoder. */
export class DracoEncoder {
  private constructor(private m: DracoModule, private qp: number) {}

  /**
   * Loads the encoder. options go to draco3d's module factory: in the
   * browser { locateFile: () => wasmURL }, under Node { wasmBinary }.
   * qp is the position quantisation in bits.
   */
  static async load(options: Record<string, unknown>, qp = 11): Promise<DracoEncoder> {
    const mod = await import('draco3d/draco_encoder_nodejs.js');
    const factory = (mod.default ?? mod) as (o: Record<string, unknown>) => Promise<DracoModule>;
    return new DracoEncoder(await factory(options), qp);
  }

  encode(c: Cloud): Uint8Array {
    const m = this.m;
    const enc = new m.Encoder();
    const builder = new m.PointCloudBuilder();
    const pc = new m.PointCloud();
    const out = new m.DracoInt8Array();
    try {
      builder.AddFloatAttribute(pc, m.POSITION, c.count, 3, c.positions);
      builder.AddUInt8Attribute(pc, m.COLOR, c.count, 3, c.colors);
      enc.SetAttributeQuantization(m.POSITION, this.qp);
      const n = enc.EncodePointCloudToDracoBuffer(pc, false, out);
      if (n <= 0) throw new Error(`draco: encoding ${c.count} points failed`);
      const data = new Uint8Array(n);
      for (let i = 0; i < n; i++) data[i] = out.GetValue(i);
      return data;
    } finally {
      m.destroy(out);
      m.destroy(pc);
      m.destroy(builder);
      m.destroy(enc);
    }
  }
}
