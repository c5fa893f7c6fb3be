// Publishing a point cloud from the browser: a feature of the viewer's SFU
// session (sfusession.ts). A Web Worker (pcpubworker.ts) makes the frames of
// a synthetic figure, splits and Draco-encodes them; this sends the
// fragments upstream on the session's "pointcloud" data channel, where the
// SFU node publishes them as the client's tracks pc0, pc1 and pc2 (see
// docs/sfu.md, "Point clouds for browsers"). Others see the figure at this
// viewer's avatar. A browser has no depth camera to read, so the figure is
// what it publishes: for demos, tests and load from real browsers.

import type { FromPubWorker, ToPubWorker } from './pcpubworker';
import { clientNumber } from './pcsource';
import type { SFUConnection } from './sfu';
import type { SFUFeature } from './sfusession';
import { h } from './ui';

/** Points per frame and frames per second by default (?pcpoints=, ?pcfps=). */
export const DEFAULT_POINTS = 10_000;
export const DEFAULT_FPS = 15;
/** A frame is dropped whole while more than this waits in the channel's send buffer. */
const MAX_BUFFERED = 1 << 20;

export interface PublishStats {
  state: string; // off, starting, publishing, waiting (no open channel), failed: …
  points: number;
  fps: number;
  framesSent: number;
  framesDropped: number; // the channel was full or not open
  framesSkipped: number; // encoding fell behind
  messagesSent: number;
  bytesSent: number;
  encodeMs: number; // the last frame's
}

export class PointCloudPublisher implements SFUFeature {
  readonly pointCloudChannel = true;
  private conn: SFUConnection | null = null;
  private worker: Worker | null = null;
  private s: PublishStats;
  private button: HTMLButtonElement;
  private line: HTMLElement;
  private timer: ReturnType<typeof setInterval>;

  constructor(points = DEFAULT_POINTS, fps = DEFAULT_FPS) {
    this.s = { state: 'off', points, fps, framesSent: 0, framesDropped: 0, framesSkipped: 0, messagesSent: 0, bytesSent: 0, encodeMs: 0 };
    this.button = h('button', { id: 'xr-pcpub', class: 'media-toggle', 'aria-pressed': 'false', onclick: () => this.toggle() }, 'Publish a point cloud');
    this.line = h('p', { class: 'media-line pcpub-line' }, '');
    const host = document.getElementById('xr-pointclouds');
    if (host) host.append(this.button, this.line);
    else document.getElementById('xr-side')?.insertBefore(h('section', { id: 'xr-pcpub-section' }, h('h3', {}, 'Point clouds'), this.button, this.line), document.querySelector('#xr-side .hint'));
    this.timer = setInterval(() => this.describe(), 1000);
  }

  onConnection(conn: SFUConnection) {
    this.conn = conn;
    // a new connection: start afresh (frame and sequence numbers, the
    // header's client number)
    if (this.publishing) this.toggle(true);
  }

  private get publishing(): boolean {
    return this.s.state !== 'off' && !this.s.state.startsWith('failed');
  }

  /** Starts or stops publishing. */
  toggle(on = !this.publishing) {
    if (!on) {
      this.post({ type: 'stop' });
      this.s.state = 'off';
      this.describe();
      return;
    }
    if (!this.worker) {
      const w = new Worker(new URL('./pcpubworker.ts', import.meta.url), { type: 'module', name: 'xrealm-pcpublish' });
      w.onerror = (e) => {
        // a worker whose script did not load (or that threw) takes no
        // more work: the next press starts a new one
        if (this.worker === w) this.worker = null;
        w.terminate();
        this.fail(e.message || 'the encoder\'s worker could not be started (its script did not load: if the server was updated, reload the page)');
      };
      w.onmessage = (e: MessageEvent<FromPubWorker>) => this.onWorker(e.data);
      this.worker = w;
    }
    this.s.state = 'starting';
    this.post({ type: 'start', points: this.s.points, fps: this.s.fps, client: clientNumber(this.conn?.client ?? '') });
    this.describe();
  }

  private post(m: ToPubWorker) {
    this.worker?.postMessage(m);
  }

  private fail(error: string) {
    this.s.state = `failed: ${error}`;
    console.warn(`xrealm: publishing a point cloud failed: ${error}`);
    this.describe();
  }

  private onWorker(m: FromPubWorker) {
    if (this.s.state === 'off') return; // a frame made before the stop
    switch (m.type) {
      case 'started':
        this.s.state = 'publishing';
        return;
      case 'failed':
        return this.fail(m.error);
      case 'skipped':
        this.s.framesSkipped++;
        return;
      case 'frame': {
        this.s.encodeMs = m.encodeMs;
        const dc = this.conn?.pointCloudChannel;
        if (!dc || dc.readyState !== 'open') {
          this.s.framesDropped++;
          this.s.state = 'waiting';
          return;
        }
        this.s.state = 'publishing';
        if (dc.bufferedAmount > MAX_BUFFERED) {
          this.s.framesDropped++;
          return;
        }
        try {
          for (const b of m.msgs) {
            dc.send(b);
            this.s.messagesSent++;
            this.s.bytesSent += b.byteLength;
          }
          this.s.framesSent++;
        } catch {
          this.s.framesDropped++; // closed under us: the session rejoins
        }
      }
    }
  }

  private describe() {
    const s = this.s;
    this.button.setAttribute('aria-pressed', String(this.publishing));
    this.button.dataset.state = s.state.split(':')[0];
    this.button.title = s.state;
    this.line.textContent = s.state === 'off' ? '' : s.state === 'publishing'
      ? `publishing ${Math.round(s.points / 1000)}k points at ${s.fps} fps · ${s.framesSent} frames sent${s.framesDropped ? `, ${s.framesDropped} dropped` : ''}`
      : s.state;
  }

  stats(): PublishStats {
    return { ...this.s };
  }

  stop() {
    clearInterval(this.timer);
    this.worker?.terminate();
  }
}

/**
 * The publishing feature of a viewer: ?pcpublish=1 starts at once, and
 * ?pcpoints= and ?pcfps= set the figure (defaults 10,000 points at 15 fps).
 */
export function pointCloudPublishFeature(): PointCloudPublisher {
  const q = new URLSearchParams(location.search);
  const points = Math.max(100, Math.min(200_000, Number(q.get('pcpoints')) || DEFAULT_POINTS));
  const fps = Math.max(1, Math.min(60, Number(q.get('pcfps')) || DEFAULT_FPS));
  const p = new PointCloudPublisher(points, fps);
  (window as any).xrealm.pcpublisher = p;
  addEventListener('pagehide', () => p.stop());
  return p;
}
