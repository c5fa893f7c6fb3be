// Point clouds received from the SFU: the data-channel wire format, the
// fragment header of the volumetric package (volumetric/packet.go),
// reassembly with a deadline, Draco decoding (the draco3d package's WASM
// decoder) and the merge of a frame's descriptions. Nothing here touches
// the DOM or three.js, so that it runs under Node in the unit tests.

/** Data-channel message prefix: slot, flags (bit 0: RTP marker), sequence number. */
export const PREFIX_SIZE = 4;
/** volumetric.HeaderSize */
export const HEADER_SIZE = 22;
const HEADER_VERSION = 1;
export const DESCRIPTIONS = 3;

export interface Fragment {
  slot: number;
  marker: boolean;
  seq: number;
  desc: number;
  client: number; // the publisher's number in the header
  frame: number;
  fragment: number;
  count: number;
  captureUs: number;
  data: Uint8Array;
}

/** Parses one data-channel message; throws on a malformed one. */
export function parseMessage(buf: ArrayBuffer | Uint8Array): Fragment {
  const b = buf instanceof Uint8Array ? buf : new Uint8Array(buf);
  if (b.length < PREFIX_SIZE + HEADER_SIZE) throw new Error(`point-cloud message of ${b.length} bytes is shorter than prefix and header`);
  const v = new DataView(b.buffer, b.byteOffset, b.byteLength);
  const h = PREFIX_SIZE;
  if (b[h] !== HEADER_VERSION) throw new Error(`fragment header version ${b[h]}, want ${HEADER_VERSION}`);
  const f: Fragment = {
    slot: b[0],
    marker: (b[1] & 1) !== 0,
    seq: v.getUint16(2),
    desc: b[h + 1],
    client: v.getUint32(h + 2),
    frame: v.getUint32(h + 6),
    fragment: v.getUint16(h + 10),
    count: v.getUint16(h + 12),
    captureUs: Number(v.getBigUint64(h + 14)),
    data: b.subarray(h + HEADER_SIZE),
  };
  if (f.count === 0 || f.fragment >= f.count) throw new Error(`fragment ${f.fragment} of ${f.count}`);
  if (f.desc >= DESCRIPTIONS) throw new Error(`description ${f.desc}`);
  return f;
}

/** A complete encoded description. */
export interface Description {
  publisher: string; // SFU client id
  desc: number;
  frame: number;
  captureUs: number;
  data: Uint8Array;
}

interface Partial {
  started: number; // ms
  count: number;
  have: number;
  size: number;
  parts: (Uint8Array | undefined)[];
  captureUs: number;
}

/**
 * Rebuilds descriptions from fragments in any order, per (publisher,
 * frame, description). A description not complete within deadlineMs of its
 * first fragment is dropped (counted in expired); one that completes after
 * a newer frame of the same publisher and description completed is late
 * and dropped too.
 */
export class Reassembler {
  private partial = new Map<string, Partial>();
  private newest = new Map<string, number>(); // publisher/desc → newest complete frame
  complete = 0;
  expired = 0;
  late = 0;

  constructor(private deadlineMs = 500, private maxPending = 256) {}

  push(publisher: string, f: Fragment, now: number): Description | null {
    const key = `${publisher}/${f.desc}/${f.frame}`;
    const newest = this.newest.get(`${publisher}/${f.desc}`);
    if (newest !== undefined && !newer(f.frame, newest)) return null; // a frame already done or superseded
    let p = this.partial.get(key);
    if (!p) {
      if (this.partial.size >= this.maxPending) this.expire(Infinity);
      p = { started: now, count: f.count, have: 0, size: 0, parts: new Array(f.count), captureUs: f.captureUs };
      this.partial.set(key, p);
    }
    if (f.count !== p.count || p.parts[f.fragment]) return null; // inconsistent or a duplicate
    p.parts[f.fragment] = f.data.slice();
    p.have++;
    p.size += f.data.length;
    if (p.have < p.count) return null;
    this.partial.delete(key);
    const data = new Uint8Array(p.size);
    let off = 0;
    for (const part of p.parts) {
      data.set(part!, off);
      off += part!.length;
    }
    this.newest.set(`${publisher}/${f.desc}`, f.frame);
    this.complete++;
    return { publisher, desc: f.desc, frame: f.frame, captureUs: p.captureUs, data };
  }

  /** Drops descriptions older than the deadline (all with now = Infinity); returns how many. */
  expire(now: number): number {
    let n = 0;
    for (const [k, p] of this.partial) {
      if (now === Infinity || now - p.started > this.deadlineMs) {
        this.partial.delete(k);
        n++;
      }
    }
    this.expired += n;
    return n;
  }

  /** Forgets a publisher (it left). */
  forget(publisher: string) {
    for (const k of [...this.partial.keys()]) if (k.startsWith(publisher + '/')) this.partial.delete(k);
    for (const k of [...this.newest.keys()]) if (k.startsWith(publisher + '/')) this.newest.delete(k);
  }

  get pending(): number {
    return this.partial.size;
  }
}

/** a is after b in uint32 frame numbers (serial-number arithmetic). */
export function newer(a: number, b: number): boolean {
  return a !== b && ((a - b) >>> 0) < 0x80000000;
}

/** Decoded points: xyz positions (metres) and rgb colours in [0, 1]. */
export interface Points {
  positions: Float32Array;
  colors: Float32Array | null;
  count: number;
}

/**
 * The frame of one publisher being shown: the descriptions of its newest
 * frame, merged (any subset of the 15/25/60 % uniform samples is a
 * uniform sample of the whole). A description of a newer frame replaces
 * the frame; one of an older frame is ignored.
 */
export class FrameMerger {
  frame = -1;
  parts = new Map<number, Points>();
  /** Points of the last frame that was replaced by a newer one. */
  lastFramePoints = 0;
  lastFrameDescs = 0;
  framesShown = 0;

  /** Adds a decoded description; returns whether the shown frame changed. */
  add(frame: number, desc: number, p: Points): boolean {
    if (this.frame >= 0 && frame !== this.frame && !newer(frame, this.frame)) return false;
    if (frame !== this.frame) {
      if (this.frame >= 0) {
        this.lastFramePoints = this.count;
        this.lastFrameDescs = this.parts.size;
      }
      this.frame = frame;
      this.parts.clear();
      this.framesShown++;
    }
    this.parts.set(desc, p);
    return true;
  }

  get count(): number {
    let n = 0;
    for (const p of this.parts.values()) n += p.count;
    return n;
  }

  /** Writes the merged frame into positions/colors (sized for count). */
  merge(positions: Float32Array, colors: Float32Array): number {
    let off = 0;
    for (const d of [...this.parts.keys()].sort()) {
      const p = this.parts.get(d)!;
      positions.set(p.positions.subarray(0, p.count * 3), off * 3);
      if (p.colors) colors.set(p.colors.subarray(0, p.count * 3), off * 3);
      else colors.fill(1, off * 3, (off + p.count) * 3);
      off += p.count;
    }
    return off;
  }
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type DracoModule = any;

/** Decodes Draco point clouds with the draco3d WASM decoder. */
export class DracoDecoder {
  private constructor(private m: DracoModule) {}

  /**
   * Loads the decoder. options go to draco3d's module factory: in the
   * browser { locateFile: () => wasmURL }, under Node { wasmBinary }.
   */
  static async load(options: Record<string, unknown>): Promise<DracoDecoder> {
    const mod = await import('draco3d/draco_decoder_nodejs.js');
    const factory = (mod.default ?? mod) as (o: Record<string, unknown>) => Promise<DracoModule>;
    return new DracoDecoder(await factory(options));
  }

  decode(data: Uint8Array): Points {
    const m = this.m;
    const buf = new m.DecoderBuffer();
    const decoder = new m.Decoder();
    const pc = new m.PointCloud();
    try {
      buf.Init(new Int8Array(data.buffer, data.byteOffset, data.byteLength), data.byteLength);
      const status = decoder.DecodeBufferToPointCloud(buf, pc);
      if (!status.ok()) throw new Error(`draco: ${status.error_msg()}`);
      const count = pc.num_points();
      const positions = this.attribute(decoder, pc, m.POSITION, count, 3, false);
      if (!positions) throw new Error('draco: point cloud without positions');
      const colors = this.attribute(decoder, pc, m.COLOR, count, 3, true);
      return { positions, colors, count };
    } finally {
      m.destroy(pc);
      m.destroy(decoder);
      m.destroy(buf);
    }
  }

  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  private attribute(decoder: any, pc: any, type: number, count: number, comps: number, normalise: boolean): Float32Array | null {
    const m = this.m;
    const id = decoder.GetAttributeId(pc, type);
    if (id < 0) return null;
    const att = decoder.GetAttribute(pc, id);
    const n = att.num_components();
    const out = new Float32Array(count * comps);
    if (normalise) {
      const bytes = count * n;
      const ptr = m._malloc(bytes);
      try {
        decoder.GetAttributeDataArrayForAllPoints(pc, att, m.DT_UINT8, bytes, ptr);
        const src = new Uint8Array(m.HEAPU8.buffer, ptr, bytes);
        for (let i = 0; i < count; i++) for (let c = 0; c < comps; c++) out[i * comps + c] = c < n ? src[i * n + c] / 255 : 1;
      } finally {
        m._free(ptr);
      }
      return out;
    }
    const bytes = count * n * 4;
    const ptr = m._malloc(bytes);
    try {
      decoder.GetAttributeDataArrayForAllPoints(pc, att, m.DT_FLOAT32, bytes, ptr);
      const src = new Float32Array(m.HEAPF32.buffer, ptr, count * n);
      for (let i = 0; i < count; i++) for (let c = 0; c < comps; c++) out[i * comps + c] = c < n ? src[i * n + c] : 0;
    } finally {
      m._free(ptr);
    }
    return out;
  }
}

/**
 * Counts sequence-number holes per slot on an unordered channel: a newer
 * number opens the holes it skips, an older one (reordered) fills one.
 * Returns the change of the number of open holes.
 */
export function seqGap(highest: Map<number, number>, slot: number, seq: number): number {
  const last = highest.get(slot);
  if (last === undefined) {
    highest.set(slot, seq);
    return 0;
  }
  const d = (seq - last) & 0xffff;
  if (d === 0) return 0;
  if (d < 0x8000) {
    highest.set(slot, seq);
    return d - 1;
  }
  return -1;
}

/** sRGB (Draco's colour bytes) to the linear values three.js expects with colour management. */
const LINEAR = Float32Array.from({ length: 256 }, (_, i) => {
  const c = i / 255;
  return c <= 0.04045 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4;
});

/** Converts colours in [0, 1] from sRGB to linear, in place. */
export function toLinear(c: Float32Array) {
  for (let i = 0; i < c.length; i++) c[i] = LINEAR[Math.round(c[i] * 255)];
}

/** Counts events in a sliding window, for per-second rates. */
export class RateMeter {
  private events: [number, number][] = [];
  constructor(private windowMs = 2000) {}
  add(now: number, n = 1) {
    this.events.push([now, n]);
  }
  rate(now: number): number {
    while (this.events.length && now - this.events[0][0] > this.windowMs) this.events.shift();
    let s = 0;
    for (const [, n] of this.events) s += n;
    return (s * 1000) / this.windowMs;
  }
}

/** Quantiles of the recent values (latencies in ms). */
export function quantiles(values: number[], qs: number[]): number[] {
  if (!values.length) return qs.map(() => 0);
  const v = [...values].sort((a, b) => a - b);
  return qs.map((q) => v[Math.min(v.length - 1, Math.floor(q * v.length))]);
}
