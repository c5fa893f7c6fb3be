// SFU signalling over the node's WebSocket (/sfu/ws): the same Signal and
// Reply JSON as the Go client (sfu/signal.go), one offer, no renegotiation.
// What the offer carries comes from the caller (prepare): audio and video
// transceivers for media.ts. The browser receives and publishes point clouds
// over a data channel (label "pointcloud"), since it cannot negotiate the
// SFU's point-cloud RTP codec: see docs/sfu.md, "Point clouds for browsers".

export const POINTCLOUD_LABEL = 'pointcloud';

/** The error of a request whose socket closed (or was not open). */
const SOCKET_CLOSED = 'SFU WebSocket closed';

/**
 * How long a request waits for its reply, and the WebSocket to open: the
 * server bounds a signal it forwards to a node at 20 s, so a reply later
 * than this is not coming (a network that drops traffic without a word,
 * which TCP notices only after minutes).
 */
export const REQUEST_TIMEOUT_MS = 25_000;

/** A published track, as the node describes it (sfu.TrackInfo). */
export interface TrackInfo {
  session: string;
  client: string;
  track: string;
  kind: string;
  mime: string;
  node: string;
}

export interface Signal {
  op: 'offer' | 'pose' | 'stats' | 'leave';
  session: string;
  client: string;
  sdp?: string;
  pose?: { position: [number, number, number]; forward: [number, number, number]; fov: number };
  estimator?: string;
  pointclouds?: number;
  frames?: unknown;
  token?: string; // offer only: the page's scene token
}

export interface Reply {
  op: 'answer' | 'ok' | 'error';
  sdp?: string;
  error?: string;
  /** An error refusing for the node's load (its client or signal limit):
   * the server says to try again (sfu/signal.go, Reply.Full). */
  full?: boolean;
}

/** The offer's refusal; full: the node refused it for its load, so trying again later may do. */
export class SFURefusal extends Error {
  constructor(message: string, readonly full: boolean) {
    super(message);
    this.name = 'SFURefusal';
  }
}

/** How many times in a row an offer refused as busy (full) is tried again. */
export const BUSY_TRIES = 10;

/**
 * The wait (ms, before jitter) before trying again after the n-th busy
 * refusal in a row (n from 1): 1 s doubling to 10 s; null after
 * BUSY_TRIES, when the page stops trying.
 */
export function busyRetryMs(n: number): number | null {
  if (!(n >= 1) || n > BUSY_TRIES) return null;
  return Math.min(1000 * 2 ** (n - 1), 10_000);
}

export interface SlotEvent {
  op: 'slots';
  slots: { mid: string; track?: TrackInfo }[];
  /** The SFU node that sent it: the one this client is placed on (the
   * server passes on no other node's events). */
  node?: string;
}

/** SFU session and client ids: [A-Za-z0-9_-]{1,64} (sfu/config.go). */
export function sfuName(s: string): string {
  const v = s.replace(/[^A-Za-z0-9_-]/g, '_').slice(0, 64);
  return v || '_';
}

/** The SFU session of a scene: "{namespace}-{scene}", made a valid id. */
export function sfuSession(ns: string, scene: string): string {
  return sfuName(`${ns}-${scene}`);
}

export interface SFUOptions {
  url: string; // ws(s)://host/sfu/ws
  session: string;
  client: string;
  /** This page's scene token, sent with the offer: the server checks it (not
   * the cookie, which the browser's tabs share) and binds the client id to it. */
  token?: string;
  /** Point-cloud descriptions received at once (data-channel slots); 0: no data channel. */
  pointClouds: number;
  /** Opens the point-cloud data channel even with no slots, to publish on it. */
  pointCloudChannel?: boolean;
  /** How long the data channel may keep retransmitting a message (ms). */
  maxPacketLifeTime?: number;
  /** Adds transceivers to the new PeerConnection before its one offer. */
  prepare?: (pc: RTCPeerConnection) => void;
  onPointCloud?: (data: ArrayBuffer) => void;
  onTrack?: (e: RTCTrackEvent) => void;
  onSlots: (slots: Map<string, TrackInfo | undefined>) => void;
  onState?: (state: string) => void;
}

/** One connection to the SFU: a WebSocket for signalling and one PeerConnection. */
export class SFUConnection {
  private ws: WebSocket | null = null;
  private pc: RTCPeerConnection | null = null;
  private dc: RTCDataChannel | null = null;
  private pending: { done: (r: Reply) => void; timer: ReturnType<typeof setTimeout> }[] = [];
  private closed = false;
  /** connect() applied the answer: a later timeout ends the connection (onState). */
  private joined = false;
  /** Fails connect() while the WebSocket opens (close() then). */
  private abort: ((e: Error) => void) | null = null;
  readonly slots = new Map<string, TrackInfo | undefined>();

  constructor(private opts: SFUOptions) {}

  /** Joins: opens the WebSocket, offers, applies the answer. */
  async connect(): Promise<void> {
    const o = this.opts;
    const ws = new WebSocket(o.url);
    this.ws = ws;
    let opening: ReturnType<typeof setTimeout> | undefined;
    try {
      await new Promise<void>((res, rej) => {
        ws.onopen = () => res();
        ws.onerror = () => rej(new Error('the server cannot be reached; trying again'));
        this.abort = rej;
        opening = setTimeout(() => {
          ws.onopen = () => ws.close(); // (see close)
          ws.onerror = null;
          rej(new Error(`the SFU WebSocket did not open within ${REQUEST_TIMEOUT_MS / 1000} s`));
        }, REQUEST_TIMEOUT_MS);
      });
    } finally {
      clearTimeout(opening);
      this.abort = null;
    }
    let socketClosed!: () => void;
    const closing = new Promise<void>((res) => (socketClosed = res));
    ws.onmessage = (e) => this.onMessage(String(e.data));
    ws.onclose = () => {
      socketClosed();
      this.failPending(SOCKET_CLOSED);
      if (!this.closed) o.onState?.('closed'); // signalling is gone: the node drops the peer
    };
    const pc = new RTCPeerConnection();
    this.pc = pc;
    pc.onconnectionstatechange = () => o.onState?.(pc.connectionState);
    if (o.onTrack) pc.ontrack = o.onTrack;
    o.prepare?.(pc);
    if (o.pointClouds > 0 || o.pointCloudChannel) {
      const dc = pc.createDataChannel(POINTCLOUD_LABEL, { ordered: false, maxPacketLifeTime: o.maxPacketLifeTime ?? 300 });
      dc.binaryType = 'arraybuffer';
      dc.onmessage = (e) => o.onPointCloud?.(e.data as ArrayBuffer);
      this.dc = dc;
    }
    await pc.setLocalDescription(await pc.createOffer());
    await Promise.race([gathered(pc), closing]); // (a closed PeerConnection gathers nothing more)
    const rep = await this.request({ op: 'offer', session: o.session, client: o.client, sdp: pc.localDescription!.sdp, pointclouds: o.pointClouds, token: o.token });
    if (rep.op === 'error' && rep.error === SOCKET_CLOSED) throw new Error('the SFU connection closed before the offer was answered');
    if (rep.op === 'error' && rep.error === timeoutError('offer')) throw new Error(rep.error);
    if (rep.op !== 'answer' || !rep.sdp) throw new SFURefusal(`SFU refused the offer: ${rep.error ?? rep.op}`, rep.op === 'error' && rep.full === true);
    await pc.setRemoteDescription({ type: 'answer', sdp: rep.sdp });
    this.joined = true;
  }

  /** Sends the camera pose (the allocator ranks publishers by it). */
  async sendPose(position: [number, number, number], forward: [number, number, number], fov: number): Promise<void> {
    const o = this.opts;
    if (this.ws?.readyState !== WebSocket.OPEN) return;
    await this.request({ op: 'pose', session: o.session, client: o.client, pose: { position, forward, fov } });
  }

  /** Reports frame delivery to the node (exported on /metrics per subscriber). */
  async sendStats(frames: unknown): Promise<void> {
    const o = this.opts;
    if (this.ws?.readyState !== WebSocket.OPEN) return;
    await this.request({ op: 'stats', session: o.session, client: o.client, frames });
  }

  /** The PeerConnection's statistics (empty before connect). */
  async getStats(): Promise<RTCStatsReport | null> {
    return this.pc ? this.pc.getStats() : null;
  }

  /** The point-cloud data channel (null without one): publishers send fragments on it. */
  get pointCloudChannel(): RTCDataChannel | null {
    return this.dc;
  }

  /** The SFU client id this connection joined as. */
  get client(): string {
    return this.opts.client;
  }

  get connected(): boolean {
    return this.pc?.connectionState === 'connected';
  }

  close() {
    this.closed = true;
    this.failPending(SOCKET_CLOSED); // (their timers too)
    const o = this.opts;
    const ws = this.ws;
    if (ws?.readyState === WebSocket.CONNECTING) {
      // Closing a WebSocket that is still opening makes Chromium warn on
      // the console ("closed before the connection is established", e.g.
      // when the page is left at once): it is closed once open.
      ws.onopen = () => ws.close();
      ws.onerror = null;
      this.abort?.(new Error('closed'));
      this.abort = null;
    } else {
      if (ws?.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ op: 'leave', session: o.session, client: o.client }));
      ws?.close();
    }
    this.pc?.close();
  }

  /**
   * Sends s and resolves with its reply, or with an error reply at once
   * when the socket is not open (closing or closed: what is sent then is
   * dropped, and its close event, which fails the pending requests, may
   * have come already), or after REQUEST_TIMEOUT_MS without a reply (see
   * timedOut).
   */
  private request(s: Signal): Promise<Reply> {
    const ws = this.ws;
    if (ws?.readyState !== WebSocket.OPEN) return Promise.resolve({ op: 'error', error: SOCKET_CLOSED });
    return new Promise((done) => {
      const timer = setTimeout(() => this.timedOut(s.op), REQUEST_TIMEOUT_MS);
      this.pending.push({ done, timer });
      ws.send(JSON.stringify(s));
    });
  }

  /**
   * A request had no reply in time: the signalling is taken for lost.
   * Replies come in order, so a late one could not be told from the next
   * request's: every pending request fails with the timeout, the socket is
   * closed, and a joined connection ends (onState "closed: …"; the offer's
   * timeout fails connect instead).
   */
  private timedOut(op: Signal['op']) {
    const error = timeoutError(op);
    const ws = this.ws;
    if (ws) {
      ws.onmessage = null;
      ws.onclose = null; // a dead network's close can take long: this is the end
      ws.close();
    }
    this.failPending(error);
    if (this.joined && !this.closed) this.opts.onState?.(`closed: ${error}`);
  }

  private failPending(error: string) {
    for (const p of this.pending.splice(0)) {
      clearTimeout(p.timer);
      p.done({ op: 'error', error });
    }
  }

  private onMessage(text: string) {
    let m: any;
    try {
      m = JSON.parse(text);
    } catch {
      console.warn('xrealm sfu: not JSON:', text.slice(0, 80));
      return;
    }
    if (m && m.op === 'slots' && Array.isArray(m.slots)) {
      for (const s of (m as SlotEvent).slots) this.slots.set(s.mid, s.track);
      this.opts.onSlots(this.slots);
      return;
    }
    // Replies come in the order of the signals.
    const p = this.pending.shift();
    if (p) {
      clearTimeout(p.timer);
      p.done(m as Reply);
    }
  }
}

function timeoutError(op: Signal['op']): string {
  return `the SFU did not answer the ${op} within ${REQUEST_TIMEOUT_MS / 1000} s`;
}

/** Waits until ICE gathering completes: the node takes a complete offer (no trickle). */
function gathered(pc: RTCPeerConnection): Promise<void> {
  if (pc.iceGatheringState === 'complete') return Promise.resolve();
  return new Promise((res) => {
    const t = setTimeout(res, 5000); // use what was gathered
    pc.addEventListener('icegatheringstatechange', () => {
      if (pc.iceGatheringState === 'complete') {
        clearTimeout(t);
        res();
      }
    });
  });
}
