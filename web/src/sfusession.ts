// The viewer's one connection to the scene's SFU session: it joins over
// /sfu/ws as the viewer's ARENA client, rejoins with backoff when the
// connection fails, sends the camera pose (the node ranks publishers by it),
// and hands what arrives to the features that plug in: remote point clouds
// (pointcloudview.ts) and audio and video (media.ts). One offer carries
// what every feature asks for, since the node does not renegotiate.

import { THREE } from './aframe';
import { BUSY_TRIES, busyRetryMs, SFUConnection, SFURefusal, sfuName, sfuSession, type TrackInfo } from './sfu';
import type { Viewer } from './viewer';

/** How long ICE may stay "disconnected" before the session rejoins. */
const DISCONNECTED_GRACE_MS = 5000;

/** A part of the client that rides the SFU connection. */
export interface SFUFeature {
  /** Resolves when the feature can take data; a rejection leaves it out of the offer. */
  ready?(): Promise<void>;
  /** Point-cloud descriptions the feature receives at once (data-channel slots). */
  pointClouds?: number;
  /** The feature sends on the point-cloud data channel (opened even with no slots). */
  pointCloudChannel?: boolean;
  /** Adds the feature's transceivers to a new PeerConnection before the offer. */
  prepare?(pc: RTCPeerConnection): void;
  /** A new connection: slot mids and sequence numbers start afresh. */
  onConnection?(conn: SFUConnection): void;
  onPointCloud?(data: ArrayBuffer): void;
  onTrack?(e: RTCTrackEvent): void;
  onSlots?(slots: Map<string, TrackInfo | undefined>): void;
  onState?(state: string): void;
}

export class SFUSession {
  private features: SFUFeature[] = [];
  private usable: SFUFeature[] = [];
  private conn: SFUConnection | null = null;
  private retryMs = 1000;
  /** Offers refused as busy (full) in a row. */
  private busyTries = 0;
  private stopped = false;
  private poseTimer: ReturnType<typeof setInterval> | null = null;
  private grace: ReturnType<typeof setTimeout> | undefined;
  private v = new THREE.Vector3();
  private fwd = new THREE.Vector3();
  state = 'starting';

  constructor(private viewer: Viewer) {}

  add(f: SFUFeature) {
    this.features.push(f);
  }

  /** The current connection, if any. */
  get connection(): SFUConnection | null {
    return this.conn;
  }

  /** Waits for the features, then joins as userClient. */
  async start(userClient: string) {
    const ready = await Promise.allSettled(this.features.map((f) => f.ready?.()));
    this.usable = this.features.filter((_, i) => ready[i].status === 'fulfilled');
    if (this.usable.length === 0 || this.stopped) return;
    this.poseTimer = setInterval(() => this.sendPose(), 500);
    this.connect(userClient);
  }

  private async connect(userClient: string) {
    if (this.stopped) return;
    const fs = this.usable;
    // The scene in the URL lets the server check this page's token (sent
    // with the offer) for the scene's session.
    const scene = encodeURIComponent(`${this.viewer.ns}/${this.viewer.scene}`);
    const url = `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}/sfu/ws?scene=${scene}`;
    const conn = new SFUConnection({
      url, session: sfuSession(this.viewer.ns, this.viewer.scene), client: sfuName(userClient),
      token: this.viewer.session()?.token,
      pointClouds: fs.reduce((n, f) => n + (f.pointClouds ?? 0), 0),
      pointCloudChannel: fs.some((f) => f.pointCloudChannel),
      prepare: (pc) => fs.forEach((f) => f.prepare?.(pc)),
      onPointCloud: (d) => fs.forEach((f) => f.onPointCloud?.(d)),
      onTrack: (e) => fs.forEach((f) => f.onTrack?.(e)),
      onSlots: (s) => fs.forEach((f) => f.onSlots?.(s)),
      onState: (s) => {
        this.setState(s);
        if (this.conn !== conn) return;
        clearTimeout(this.grace);
        // ICE often recovers from "disconnected" (a blip on Wi-Fi): rejoin,
        // which drops every stream, only when it lasts
        if (s === 'disconnected') this.grace = setTimeout(() => this.conn === conn && this.retry(userClient), DISCONNECTED_GRACE_MS);
        // ("closed: …": a request had no reply in time)
        if (s === 'failed' || s === 'closed' || s.startsWith('closed:')) this.retry(userClient);
      },
    });
    this.conn = conn;
    fs.forEach((f) => f.onConnection?.(conn));
    this.setState('connecting');
    try {
      await conn.connect();
      this.retryMs = 1000;
      this.busyTries = 0;
    } catch (e) {
      if (this.conn !== conn) return; // closed meanwhile: stopped, or replaced by a newer one
      if (e instanceof SFURefusal && e.full) {
        this.busy(userClient, e.message);
        return;
      }
      this.busyTries = 0;
      console.info('xrealm: SFU not joined:', (e as Error).message);
      this.setState(`not joined: ${(e as Error).message}`);
      this.retry(userClient);
    }
  }

  private retry(userClient: string) {
    const conn = this.conn;
    this.conn = null;
    conn?.close();
    if (this.stopped) return;
    const ms = this.retryMs * (0.8 + Math.random() * 0.4);
    this.retryMs = Math.min(this.retryMs * 2, 30_000);
    setTimeout(() => this.connect(userClient), ms);
  }

  /**
   * The node refused the offer for its load (at its client or signal
   * limit): tries again after 1 s doubling to 10 s, saying the media
   * server is busy, and stops after BUSY_TRIES refusals in a row.
   */
  private busy(userClient: string, why: string) {
    const conn = this.conn;
    this.conn = null;
    conn?.close();
    if (this.stopped) return;
    this.busyTries++;
    console.info('xrealm: SFU not joined, busy:', why);
    const base = busyRetryMs(this.busyTries);
    if (base === null) {
      this.setState(`the media server is busy: gave up after ${BUSY_TRIES} tries; reload the page to try again`);
      return;
    }
    const ms = base * (0.8 + Math.random() * 0.4);
    this.setState(`the media server is busy; trying again in ${Math.max(1, Math.round(ms / 1000))} s (retry ${this.busyTries} of ${BUSY_TRIES})`);
    setTimeout(() => this.connect(userClient), ms);
  }

  private setState(s: string) {
    this.state = s;
    this.usable.forEach((f) => f.onState?.(s));
  }

  /** The viewer gave up before it had a session: the SFU is never joined. */
  notStarted(reason: string) {
    this.state = `not joined: ${reason}`;
    this.features.forEach((f) => f.onState?.(this.state));
  }

  private sendPose() {
    const cam = (this.viewer.sceneEl as any).camera;
    if (!cam || !this.conn?.connected) return;
    cam.getWorldPosition(this.v);
    cam.getWorldDirection(this.fwd);
    const fov = THREE.MathUtils.degToRad(cam.fov ?? 80) * (cam.aspect ?? 1);
    this.conn.sendPose([this.v.x, this.v.y, this.v.z], [this.fwd.x, this.fwd.y, this.fwd.z], Math.min(fov, Math.PI)).catch(() => {});
  }

  stop() {
    this.stopped = true;
    clearTimeout(this.grace);
    if (this.poseTimer) clearInterval(this.poseTimer);
    this.conn?.close();
    this.conn = null;
  }
}

/** Starts the session once the viewer has its ARENA session (its client id). */
export function startSFUSession(viewer: Viewer, features: SFUFeature[]): SFUSession {
  const s = new SFUSession(viewer);
  features.forEach((f) => s.add(f));
  let started = false;
  const go = (userClient: string) => {
    if (started) return;
    started = true;
    s.start(userClient);
  };
  viewer.onSession((x) => go(x.userClient));
  // Without a session (sign-in refused) the features would say "starting"
  // for good.
  viewer.onFailed((reason) => started || s.notStarted(reason));
  const cur = viewer.session();
  if (cur) go(cur.userClient);
  addEventListener('pagehide', () => s.stop());
  return s;
}
