// Web Worker of the point-cloud view: reassembles fragments and decodes
// descriptions with draco3d off the page's main thread, which keeps
// rendering. Messages: see PointCloudView (pointcloudview.ts).

import wasmURL from 'draco3d/draco_decoder.wasm?url';
import { DracoDecoder, Reassembler, parseMessage, toLinear } from './pointcloud';

export type ToWorker =
  | { type: 'frag'; publisher: string; buf: ArrayBuffer }
  | { type: 'tick' }
  | { type: 'forget'; publisher: string };

export type FromWorker =
  | { type: 'ready' }
  | { type: 'failed'; error: string }
  | { type: 'points'; publisher: string; frame: number; desc: number; captureUs: number; positions: Float32Array; colors: Float32Array | null; count: number }
  | { type: 'problem'; kind: 'bad' | 'decode'; error: string }
  | { type: 'stats'; complete: number; expired: number };

const DEADLINE_MS = 500;
const reasm = new Reassembler(DEADLINE_MS);
let decoder: DracoDecoder | null = null;
const post = (m: FromWorker, transfer: Transferable[] = []) => (self as unknown as Worker).postMessage(m, transfer);

DracoDecoder.load({ locateFile: () => new URL(wasmURL, self.location.href).href }).then(
  (d) => {
    decoder = d;
    post({ type: 'ready' });
  },
  (e) => post({ type: 'failed', error: String((e as Error)?.message ?? e) }),
);

self.onmessage = (e: MessageEvent<ToWorker>) => {
  const m = e.data;
  switch (m.type) {
    case 'frag': {
      if (!decoder) return; // not loaded yet: nothing to decode with
      let f;
      try {
        f = parseMessage(m.buf);
      } catch (err) {
        post({ type: 'problem', kind: 'bad', error: (err as Error).message });
        return;
      }
      const d = reasm.push(m.publisher, f, performance.now());
      if (!d) return;
      try {
        const p = decoder.decode(d.data);
        if (p.colors) toLinear(p.colors);
        const transfer: Transferable[] = [p.positions.buffer];
        if (p.colors) transfer.push(p.colors.buffer);
        post({ type: 'points', publisher: d.publisher, frame: d.frame, desc: d.desc, captureUs: d.captureUs, positions: p.positions, colors: p.colors, count: p.count }, transfer);
      } catch (err) {
        post({ type: 'problem', kind: 'decode', error: (err as Error).message });
      }
      return;
    }
    case 'tick':
      reasm.expire(performance.now());
      post({ type: 'stats', complete: reasm.complete, expired: reasm.expired });
      return;
    case 'forget':
      reasm.forget(m.publisher);
  }
};
