// Remote point clouds in the viewer: a feature of the viewer's SFU session
// (sfusession.ts) that receives point-cloud fragments on the "pointcloud" data
// channel, has a Web Worker (pcworker.ts) reassemble and decode them
// (draco3d), merges the descriptions of a frame and draws each publisher
// as a THREE.Points at its avatar. See docs/web.md.

import { THREE } from './aframe';
import type { FromWorker, ToWorker } from './pcworker';
import { FrameMerger, PREFIX_SIZE, RateMeter, quantiles, seqGap, type Points } from './pointcloud';
import type { SFUConnection, TrackInfo } from './sfu';
import type { SFUFeature } from './sfusession';
import { avatarElement, standIn } from './presence';
import { WarningCap } from './warncap';
import { h } from './ui';
import type { Viewer } from './viewer';

/** Point-cloud descriptions received at once: 4 publishers × 3 descriptions. */
export const DEFAULT_SLOTS = 12;
/** The figure's head centre above its feet (volumetric/pointcloud.go): it is put at the avatar's head. */
const HEAD_HEIGHT = 1.65;
/** The parts of an avatar a point cloud stands in for. */
const BODY = ['head', 'visor', 'body'];
/** A publisher no slot carries and nothing arrived from for this long is removed. */
const GONE_MS = 3000;

interface Publisher {
  client: string;
  merger: FrameMerger;
  group: any; // THREE.Group: placement
  points: any; // THREE.Points
  capacity: number;
  anchor: 'avatar' | 'fallback';
  avatar: any; // the avatar element whose body is hidden
  index: number; // fallback place
  lastData: number;
  dirty: boolean;
}

export interface PointCloudStats {
  state: string;
  publishers: { client: string; frame: number; points: number; lastFramePoints: number; lastFrameDescs: number; frames: number; anchor: string; position: { x: number; y: number; z: number } }[];
  pointsPerSecond: number;
  framesPerSecond: number;
  descriptions: number;
  expired: number;
  decodeErrors: number;
  badMessages: number;
  gaps: number;
  latencyP50Ms: number;
}

export class PointCloudView implements SFUFeature {
  private sfu: SFUConnection | null = null;
  private worker: Worker | null = null;
  private decoderReady: Promise<void> | null = null;
  private complete = 0;
  private expired = 0;
  private pubs = new Map<string, Publisher>();
  private slots = new Map<string, TrackInfo | undefined>();
  private root = new THREE.Group();
  private pointsMeter = new RateMeter();
  private framesMeter = new RateMeter();
  private latencies: number[] = [];
  private seqs = new Map<number, number>();
  private nextIndex = 0;
  private state = 'starting';
  private decodeErrors = 0;
  private badMessages = 0;
  private gaps = 0;
  /** The warnings of bad and undecodable messages, which a publisher may send by the thousand. */
  private problems = new WarningCap('point-cloud warnings');
  private timers: ReturnType<typeof setInterval>[] = [];
  private stopped = false;
  readonly el: HTMLElement;
  private v = new THREE.Vector3();
  private q = new THREE.Quaternion();
  private e = new THREE.Euler();

  constructor(viewer: Viewer, readonly pointClouds = DEFAULT_SLOTS) {
    this.root.name = 'xr-pointclouds';
    (viewer.sceneEl as any).object3D.add(this.root);
    this.el = h('section', { id: 'xr-pointclouds', 'data-state': 'starting' }, h('h3', {}, 'Point clouds'), h('p', { class: 'pc-line' }, 'starting…'));
    document.getElementById('xr-side')?.insertBefore(this.el, document.querySelector('#xr-side .hint'));
    this.timers.push(setInterval(() => this.second(), 1000));
    const frame = () => {
      if (this.stopped) return;
      this.place();
      requestAnimationFrame(frame);
    };
    requestAnimationFrame(frame);
  }

  /** Starts the decoder worker: without a decoder, no data channel is asked for. */
  async ready() {
    try {
      await this.startWorker();
    } catch (e) {
      this.onState(`no decoder: ${(e as Error).message}`);
      throw e;
    }
  }

  private startWorker(): Promise<void> {
    if (this.decoderReady) return this.decoderReady;
    this.decoderReady = new Promise<void>((res, rej) => {
      const w = new Worker(new URL('./pcworker.ts', import.meta.url), { type: 'module', name: 'xrealm-pointclouds' });
      this.worker = w;
      let started = false;
      w.onerror = (e) => {
        // (an error event without a message: the script did not load)
        const why = e.message || 'its worker could not be started (its script did not load: if the server was updated, reload the page)';
        if (!started) rej(new Error(why));
        else console.warn(`xrealm: point clouds: the decoder's worker failed: ${why}`);
      };
      w.onmessage = (e: MessageEvent<FromWorker>) => {
        const m = e.data;
        switch (m.type) {
          case 'ready':
            started = true;
            return res();
          case 'failed':
            return rej(new Error(m.error));
          case 'points':
            return this.onPoints(m.publisher, m.frame, m.desc, m.captureUs, { positions: m.positions, colors: m.colors, count: m.count });
          case 'problem':
            if (m.kind === 'bad') this.badMessages++;
            else this.decodeErrors++;
            this.warn(this.problems.warn(`xrealm: point clouds: ${m.kind === 'bad' ? '' : 'decode failed: '}${m.error}`));
            return;
          case 'stats':
            this.complete = m.complete;
            this.expired = m.expired;
        }
      };
    });
    return this.decoderReady;
  }

  private toWorker(m: ToWorker, transfer: Transferable[] = []) {
    this.worker?.postMessage(m, transfer);
  }

  onConnection(conn: SFUConnection) {
    this.sfu = conn;
    this.seqs.clear(); // a new connection numbers its slots afresh
    this.slots = new Map();
  }

  onSlots(s: Map<string, TrackInfo | undefined>) {
    this.slots = new Map(s);
  }

  onState(s: string) {
    this.state = s;
    this.el.dataset.state = s;
  }

  /** A data-channel message: the prefix is read here, the rest in the worker. */
  onPointCloud(data: ArrayBuffer) {
    if (data.byteLength < PREFIX_SIZE) {
      this.badMessages++;
      return;
    }
    const v = new DataView(data);
    const slot = v.getUint8(0);
    this.gaps += seqGap(this.seqs, slot, v.getUint16(2));
    const track = this.slots.get(`dc${slot}`);
    if (!track) return; // before the slot event arrived
    this.toWorker({ type: 'frag', publisher: track.client, buf: data }, [data]);
  }

  private onPoints(publisher: string, frame: number, desc: number, captureUs: number, pts: Points) {
    const now = performance.now();
    // capture time is the publisher's clock: exact only on one machine
    const lat = Date.now() - captureUs / 1000;
    if (lat >= 0 && lat < 60_000) {
      this.latencies.push(lat);
      if (this.latencies.length > 512) this.latencies.splice(0, this.latencies.length - 512);
    }
    const p = this.publisher(publisher);
    const before = p.merger.framesShown;
    if (p.merger.add(frame, desc, pts)) {
      p.dirty = true;
      if (p.merger.framesShown !== before) this.framesMeter.add(now);
    }
    p.lastData = now;
    this.pointsMeter.add(now, pts.count);
    if (p.dirty) this.upload(p);
  }

  private publisher(client: string): Publisher {
    let p = this.pubs.get(client);
    if (p) return p;
    const geom = new THREE.BufferGeometry();
    const mat = new THREE.PointsMaterial({ size: 0.015, vertexColors: true, sizeAttenuation: true });
    const points = new THREE.Points(geom, mat);
    points.frustumCulled = false;
    points.name = `pointcloud:${client}`;
    const group = new THREE.Group();
    group.add(points);
    this.root.add(group);
    p = { client, merger: new FrameMerger(), group, points, capacity: 0, anchor: 'fallback', avatar: null, index: this.nextIndex++, lastData: performance.now(), dirty: false };
    this.pubs.set(client, p);
    return p;
  }

  /** Puts the merged frame into the publisher's geometry. */
  private upload(p: Publisher) {
    const n = p.merger.count;
    const geom = p.points.geometry;
    if (n > p.capacity) {
      p.capacity = Math.max(n, Math.ceil(p.capacity * 1.5));
      geom.setAttribute('position', new THREE.BufferAttribute(new Float32Array(p.capacity * 3), 3));
      geom.setAttribute('color', new THREE.BufferAttribute(new Float32Array(p.capacity * 3), 3));
    }
    const pos = geom.getAttribute('position'), col = geom.getAttribute('color');
    const k = p.merger.merge(pos.array, col.array);
    pos.needsUpdate = true;
    col.needsUpdate = true;
    geom.setDrawRange(0, k);
    p.dirty = false;
  }

  /**
   * Places each cloud: at its publisher's avatar when the ARENA client
   * with the same id has one (feet below the avatar's head, turned with
   * its yaw), else in a row on the floor 4 m in front of the origin.
   */
  private place() {
    for (const p of this.pubs.values()) {
      const av = avatarElement(p.client);
      const o = av?.object3D;
      if (o) {
        o.getWorldPosition(this.v);
        o.getWorldQuaternion(this.q);
        this.e.setFromQuaternion(this.q, 'YXZ');
        p.group.position.set(this.v.x, this.v.y - HEAD_HEIGHT, this.v.z);
        p.group.rotation.set(0, this.e.y, 0);
        p.anchor = 'avatar';
        p.avatar = standIn(`pointcloud:${p.client}`, p.avatar, av, BODY);
      } else {
        p.group.position.set(2 * p.index, 0, -4);
        p.group.rotation.set(0, 0, 0);
        p.anchor = 'fallback';
        p.avatar = null;
      }
    }
  }

  private warn(line: string | null) {
    if (line !== null) console.warn(line);
  }

  private second() {
    const now = performance.now();
    this.toWorker({ type: 'tick' });
    this.warn(this.problems.summary(now));
    // the data-channel slots: a publisher's camera or microphone (other slots) does not keep its cloud
    const carried = new Set([...this.slots].filter(([slot, t]) => t && slot.startsWith('dc')).map(([, t]) => t!.client));
    for (const p of [...this.pubs.values()]) {
      if (!carried.has(p.client) && now - p.lastData > GONE_MS) {
        this.root.remove(p.group);
        standIn(`pointcloud:${p.client}`, p.avatar, null, BODY);
        p.points.geometry.dispose();
        p.points.material.dispose();
        this.pubs.delete(p.client);
        this.toWorker({ type: 'forget', publisher: p.client });
      }
    }
    const s = this.stats();
    const el = this.el.dataset;
    el.publishers = String(s.publishers.length);
    el.pointsPerSecond = String(Math.round(s.pointsPerSecond));
    el.framesPerSecond = s.framesPerSecond.toFixed(1);
    el.points = String(s.publishers.reduce((a, p) => a + p.points, 0));
    el.framePoints = String(s.publishers.reduce((a, p) => a + p.lastFramePoints, 0));
    el.descriptions = String(s.descriptions);
    el.expired = String(s.expired);
    (this.el.querySelector('.pc-line') as HTMLElement).textContent = s.publishers.length
      ? `${s.publishers.length} publisher${s.publishers.length > 1 ? 's' : ''} · ${fmt(s.pointsPerSecond)} points/s · ${s.framesPerSecond.toFixed(1)} frames/s`
      : this.state === 'connected' ? 'none received' : this.state;
    const [p50, p90, p99] = quantiles(this.latencies, [0.5, 0.9, 0.99]);
    if (this.complete > 0) {
      this.sfu?.sendStats({ complete: this.complete, expired: this.expired, p50_ms: p50, p90_ms: p90, p99_ms: p99,
        sum_ms: this.latencies.reduce((a, b) => a + b, 0), count: this.latencies.length }).catch(() => {});
    }
  }

  stats(): PointCloudStats {
    const now = performance.now();
    return {
      state: this.state,
      publishers: [...this.pubs.values()].map((p) => ({
        client: p.client, frame: p.merger.frame, points: p.merger.count, lastFramePoints: p.merger.lastFramePoints,
        lastFrameDescs: p.merger.lastFrameDescs, frames: p.merger.framesShown, anchor: p.anchor,
        position: { x: p.group.position.x, y: p.group.position.y, z: p.group.position.z },
      })),
      pointsPerSecond: this.pointsMeter.rate(now),
      framesPerSecond: this.framesMeter.rate(now),
      descriptions: this.complete,
      expired: this.expired,
      decodeErrors: this.decodeErrors,
      badMessages: this.badMessages,
      gaps: Math.max(0, this.gaps),
      latencyP50Ms: quantiles(this.latencies, [0.5])[0],
    };
  }

  /** Stops drawing and decoding; the warnings counted since the last count are counted now, whenever that was. */
  stop() {
    this.stopped = true;
    this.timers.forEach(clearInterval);
    this.worker?.terminate();
    this.warn(this.problems.summary(Infinity));
  }
}

function fmt(n: number): string {
  return n >= 1e6 ? `${(n / 1e6).toFixed(1)}M` : n >= 1e3 ? `${(n / 1e3).toFixed(0)}k` : String(Math.round(n));
}

/** The point-cloud feature of a viewer (?pcslots=N sets the slots, default 12). */
export function pointCloudFeature(viewer: Viewer): PointCloudView {
  const q = new URLSearchParams(location.search);
  const slots = Math.max(1, Math.min(64, Number(q.get('pcslots')) || DEFAULT_SLOTS));
  const view = new PointCloudView(viewer, slots);
  (window as any).xrealm.pointclouds = view;
  addEventListener('pagehide', () => view.stop());
  return view;
}
