// Web Worker of the point-cloud publisher (pcpublish.ts): generates the
// synthetic figure's frames, splits each into its three descriptions,
// encodes them with draco3d and cuts them into data-channel messages, off
// the page's main thread. The page sends the messages.

import wasmURL from 'draco3d/draco_encoder.wasm?url';
import { DracoEncoder, Figure, Packetizer, Splitter } from './pcsource';

export type ToPubWorker =
  | { type: 'start'; points: number; fps: number; client: number }
  | { type: 'stop' };

export type FromPubWorker =
  | { type: 'started' }
  | { type: 'failed'; error: string }
  | { type: 'frame'; frame: number; msgs: ArrayBuffer[]; bytes: number; encodeMs: number }
  | { type: 'skipped' }; // encoding fell behind the frame rate

const post = (m: FromPubWorker, transfer: Transferable[] = []) => (self as unknown as Worker).postMessage(m, transfer);
let encoder: Promise<DracoEncoder> | null = null;
let timer: ReturnType<typeof setTimeout> | undefined;
let run = 0; // start/stop generation: a stale loop ends

self.onmessage = async (e: MessageEvent<ToPubWorker>) => {
  const m = e.data;
  clearTimeout(timer);
  run++;
  if (m.type === 'stop') return;
  const mine = run;
  let figure: Figure, splitter: Splitter, enc: DracoEncoder;
  try {
    encoder ??= DracoEncoder.load({ locateFile: () => new URL(wasmURL, self.location.href).href });
    enc = await encoder;
    figure = new Figure(m.points, m.fps);
    splitter = new Splitter(m.points);
  } catch (err) {
    encoder = null;
    post({ type: 'failed', error: String((err as Error)?.message ?? err) });
    return;
  }
  if (mine !== run) return;
  post({ type: 'started' });
  const pk = new Packetizer();
  const period = 1000 / m.fps;
  const t0 = performance.now();
  let frame = 0;
  const tick = () => {
    if (mine !== run) return;
    const start = performance.now();
    const due = Math.floor((start - t0) / period);
    if (due > frame + 1) {
      post({ type: 'skipped' }); // behind: skip to the frame that is due
      frame = due;
    }
    const captureUs = (performance.timeOrigin + start) * 1000;
    const parts = splitter.split(figure.frame(frame));
    const msgs: ArrayBuffer[] = [];
    let bytes = 0;
    parts.forEach((p, desc) => {
      const data = enc.encode(p);
      bytes += data.length;
      msgs.push(...pk.packetize({ desc, client: m.client, frame, captureUs }, data));
    });
    post({ type: 'frame', frame, msgs, bytes, encodeMs: performance.now() - start }, msgs);
    frame++;
    timer = setTimeout(tick, Math.max(0, t0 + frame * period - performance.now()));
  };
  tick();
};
