// Audio and video in the viewer: a feature of the viewer's SFU session
// (sfusession.ts).
//
// Local: the Microphone and Camera buttons take a track from getUserMedia
// and put it on a send transceiver that the session's one offer
// pre-negotiated; turning either on or off is replaceTrack, never a
// renegotiation. Off stops the device.
//
// Remote: receive slots (8 audio and 4 video by default; ?audioslots=N,
// ?videoslots=N). The node's slot events say which publisher each slot
// carries. Video is drawn where the publisher's avatar has its head, turned
// to the viewer, while frames arrive; audio is spatial, a Web Audio panner at
// the avatar (at the listener when the publisher has no avatar here).
// See docs/web.md, "Audio and video".

import { THREE } from './aframe';
import { avatarElement, covered, standIn } from './presence';
import type { SFUConnection, TrackInfo } from './sfu';
import type { SFUFeature } from './sfusession';
import { h, toast } from './ui';
import type { Viewer } from './viewer';

export const DEFAULT_AUDIO_SLOTS = 8;
export const DEFAULT_VIDEO_SLOTS = 4;
/** A video slot shows nothing when no frame came for this long (its publisher turned the camera off). */
const VIDEO_STALE_MS = 1500;
const PANEL_WIDTH = 0.48;
/**
 * Where a panel stands when a point cloud stands in for the avatar's body:
 * beside the figure's head, this far to the viewer's right, so that its
 * inner edge is 0.4 m from the figure's axis (its shoulders reach 0.34 m;
 * pcsource.ts).
 */
const BESIDE = PANEL_WIDTH / 2 + 0.4;
/** The parts of an avatar a video panel stands in for. */
const HEAD = ['head', 'visor'];
const GESTURES = ['pointerdown', 'pointerup', 'click', 'touchend', 'keydown'];
/**
 * Samples the audio level is measured over: about 0.7 s (the longest
 * analyser window). A reading is the RMS over that window, not over the
 * last few milliseconds, so that it does not fall to the noise floor
 * between syllables, or between the 20 ms beeps that Chromium's fake
 * microphone makes every 500 ms.
 */
const LEVEL_WINDOW = 32768;
/** The bottom of the panel's level meter: quieter is shown as silent. */
const LEVEL_FLOOR_DB = -60;

type Kind = 'audio' | 'video';

const CONSTRAINTS: Record<Kind, MediaTrackConstraints> = {
  audio: { echoCancellation: true, noiseSuppression: true, autoGainControl: true },
  video: { width: { ideal: 480 }, height: { ideal: 360 }, frameRate: { ideal: 15, max: 30 } },
};

interface Local {
  kind: Kind;
  /** The track being sent: set once the sender took it (replaceTrack resolved). */
  track: MediaStreamTrack | null;
  /** The track from the device while the sender has not taken it yet. */
  pending: MediaStreamTrack | null;
  /** Counts the turns on and off: a step that finds it changed was overtaken. */
  turn: number;
  sender: RTCRtpSender | null;
  state: string; // off, starting, on, or what failed
  button: HTMLButtonElement;
}

interface Remote {
  mid: string;
  kind: Kind;
  track: MediaStreamTrack;
  client?: string;
  index: number; // video: place in the row when the publisher has no avatar
  // video
  video?: HTMLVideoElement;
  mesh?: any; // THREE.Mesh
  frames: number;
  lastFrame: number;
  anchor: 'avatar' | 'fallback' | 'hidden';
  avatar?: any; // the avatar whose head the panel replaces
  // audio
  audio?: HTMLAudioElement;
  nodes?: AudioNode[];
  panner?: PannerNode;
  analyser?: AnalyserNode;
}

export interface MediaStats {
  state: string;
  microphone: string;
  camera: string;
  audioContext: string;
  remote: { mid: string; kind: Kind; client: string; frames: number; width: number; height: number; anchor: string; level: number }[];
}

export class MediaView implements SFUFeature {
  private local: Record<Kind, Local>;
  private remotes = new Map<string, Remote>();
  private slots = new Map<string, TrackInfo | undefined>();
  private root = new THREE.Group();
  private ctx: AudioContext | null = null;
  private state = 'starting';
  private stopped = false;
  private nextIndex = 0;
  private timer: ReturnType<typeof setInterval> | undefined;
  private preview: HTMLVideoElement;
  private line: HTMLElement;
  private levelRow: HTMLElement;
  private meter: HTMLMeterElement;
  private levelValue: HTMLElement;
  readonly el: HTMLElement;
  private v = new THREE.Vector3();
  private q = new THREE.Quaternion();
  private fwd = new THREE.Vector3();
  private right = new THREE.Vector3();
  private up = new THREE.Vector3();

  constructor(private viewer: Viewer, private audioSlots = DEFAULT_AUDIO_SLOTS, private videoSlots = DEFAULT_VIDEO_SLOTS) {
    this.root.name = 'xr-media';
    (viewer.sceneEl as any).object3D.add(this.root);
    const button = (kind: Kind, label: string) =>
      h('button', { id: kind === 'audio' ? 'xr-mic' : 'xr-cam', class: 'media-toggle', 'aria-pressed': 'false', onclick: () => this.toggle(kind) }, label);
    this.local = {
      audio: { kind: 'audio', track: null, pending: null, turn: 0, sender: null, state: 'off', button: button('audio', 'Microphone') },
      video: { kind: 'video', track: null, pending: null, turn: 0, sender: null, state: 'off', button: button('video', 'Camera') },
    };
    this.preview = h('video', { id: 'xr-preview', muted: true, autoplay: true, playsInline: true, hidden: true });
    this.line = h('p', { class: 'media-line' }, 'starting…');
    // The loudest microphone you hear: its meter and its value in dB on one
    // line (the value in a fixed width, so that the meter keeps its length).
    this.meter = h('meter', { id: 'xr-audio-level', min: 0, max: -LEVEL_FLOOR_DB, low: 20, high: 50, optimum: 30, 'aria-label': 'Loudest microphone' });
    this.levelValue = h('span', { id: 'xr-audio-db', class: 'media-level-value' });
    this.levelRow = h('div', { id: 'xr-audio-row', class: 'media-level', hidden: true }, h('span', { 'aria-hidden': 'true' }, 'loudest'), this.meter, this.levelValue);
    this.el = h('section', { id: 'xr-media', 'data-state': 'starting' }, h('h3', {}, 'Audio and video'),
      h('div', { class: 'media-buttons' }, this.local.audio.button, this.local.video.button), this.preview, this.line, this.levelRow);
    document.getElementById('xr-side')?.insertBefore(this.el, document.querySelector('#xr-side .hint'));
    // Browsers start audio only after a gesture on the page (on touch
    // screens a click or touchend, not a pointerdown).
    for (const ev of GESTURES) addEventListener(ev, this.resume);
    const frame = () => {
      if (this.stopped) return;
      this.place();
      requestAnimationFrame(frame);
    };
    requestAnimationFrame(frame);
    this.timer = setInterval(() => this.describe(), 1000);
  }

  private resume = () => {
    if (this.ctx?.state === 'suspended') this.ctx.resume().catch(() => {});
  };

  /**
   * Turns the microphone or camera on or off. The device is on (the state
   * 'on', the button pressed) only once the sender took its track:
   * replaceTrack may take a while, or fail, and until it resolves nothing
   * is sent. A click while the browser asks for the device or while the
   * sender takes the track cancels.
   */
  async toggle(kind: Kind, on = !this.local[kind].track) {
    const l = this.local[kind];
    if (l.state === 'starting') on = false;
    const turn = ++l.turn;
    if (!on) {
      l.track?.stop();
      l.pending?.stop();
      l.track = null;
      l.pending = null;
      l.state = 'off';
      this.showLocal(l);
      await l.sender?.replaceTrack(null).catch(() => {});
      return;
    }
    if (l.track) return;
    if (!navigator.mediaDevices?.getUserMedia) {
      this.fail(l, 'this page is not a secure context: open it over HTTPS (xrealm serve --https-addr) or on localhost');
      return;
    }
    l.state = 'starting';
    this.showLocal(l);
    let track: MediaStreamTrack;
    try {
      const stream = await navigator.mediaDevices.getUserMedia({ [kind]: CONSTRAINTS[kind] });
      track = stream.getTracks()[0];
    } catch (e) {
      if (l.turn !== turn) return;
      const err = e as DOMException;
      const why = err.name === 'NotAllowedError' ? 'permission denied' : err.name === 'NotFoundError' ? `no ${kind === 'audio' ? 'microphone' : 'camera'} found` : `${err.name}: ${err.message}`;
      this.fail(l, why);
      return;
    }
    if (l.turn !== turn || this.stopped) {
      track.stop(); // turned off meanwhile
      return;
    }
    l.pending = track;
    const sender = l.sender;
    try {
      await sender?.replaceTrack(track);
    } catch (e) {
      if (l.turn !== turn) return; // turned off meanwhile: the off step stopped the track
      // A new connection's sender (prepare) took the track meanwhile: that
      // one counts, and says itself if it fails.
      if (l.sender === sender) {
        l.pending = null;
        track.stop();
        this.fail(l, `cannot send it: ${(e as Error).message}`);
        return;
      }
    }
    if (l.turn !== turn) return;
    l.pending = null;
    l.track = track;
    l.state = 'on';
    track.onended = () => l.track === track && this.toggle(kind, false); // device unplugged, permission revoked
    this.showLocal(l);
    this.audioContext(); // a click started this: audio can start too
  }

  private fail(l: Local, why: string) {
    l.state = `failed: ${why}`;
    toast(`${l.kind === 'audio' ? 'Microphone' : 'Camera'}: ${why}`, 'error');
    this.showLocal(l);
  }

  private showLocal(l: Local) {
    l.button.setAttribute('aria-pressed', String(!!l.track));
    l.button.dataset.state = l.state.split(':')[0];
    l.button.title = l.state;
    if (l.kind === 'video') {
      this.preview.srcObject = l.track ? new MediaStream([l.track]) : null;
      this.preview.hidden = !l.track;
    }
  }

  // --- SFUFeature ---

  prepare(pc: RTCPeerConnection) {
    for (const l of Object.values(this.local)) {
      l.sender = pc.addTransceiver(l.kind, { direction: 'sendonly' }).sender;
      // the track on, or the one the old connection's sender was taking
      const track = l.track ?? l.pending;
      if (track) {
        const sender = l.sender;
        sender.replaceTrack(track).catch((e) => {
          if ((l.track ?? l.pending) !== track || l.sender !== sender) return;
          l.turn++;
          track.stop();
          l.track = null;
          l.pending = null;
          this.fail(l, `cannot send it: ${(e as Error).message}`);
        });
      }
    }
    for (let i = 0; i < this.audioSlots; i++) pc.addTransceiver('audio', { direction: 'recvonly' });
    for (let i = 0; i < this.videoSlots; i++) pc.addTransceiver('video', { direction: 'recvonly' });
  }

  onConnection(_conn: SFUConnection) {
    for (const r of this.remotes.values()) this.dispose(r);
    this.remotes.clear();
    this.slots = new Map();
    this.nextIndex = 0;
  }

  onTrack(e: RTCTrackEvent) {
    const mid = e.transceiver.mid;
    const kind = e.track.kind as Kind;
    if (!mid || (kind !== 'audio' && kind !== 'video')) return;
    const r: Remote = { mid, kind, track: e.track, index: kind === 'video' ? this.nextIndex++ : -1, frames: 0, lastFrame: 0, anchor: 'hidden' };
    const stream = new MediaStream([e.track]);
    if (kind === 'video') this.startVideo(r, stream);
    else this.startAudio(r, stream);
    this.remotes.set(mid, r);
    this.bind(r);
  }

  onSlots(s: Map<string, TrackInfo | undefined>) {
    this.slots = new Map(s);
    for (const r of this.remotes.values()) this.bind(r);
  }

  onState(s: string) {
    this.state = s;
    this.el.dataset.state = s;
  }

  // --- remote media ---

  private bind(r: Remote) {
    const client = this.slots.get(r.mid)?.client;
    if (client === r.client) return;
    r.client = client;
    r.frames = 0;
    r.lastFrame = 0;
  }

  private startVideo(r: Remote, stream: MediaStream) {
    const video = h('video', { muted: true, autoplay: true, playsInline: true });
    video.srcObject = stream;
    video.play().catch(() => {});
    const count = () => {
      if (!this.remotes.has(r.mid) || r.video !== video) return;
      r.frames++;
      r.lastFrame = performance.now();
      video.requestVideoFrameCallback(count);
    };
    video.requestVideoFrameCallback(count);
    const tex = new THREE.VideoTexture(video);
    tex.colorSpace = THREE.SRGBColorSpace;
    const mesh = new THREE.Mesh(new THREE.PlaneGeometry(1, 1), new THREE.MeshBasicMaterial({ map: tex, side: THREE.DoubleSide, toneMapped: false }));
    mesh.name = `video:${r.mid}`;
    mesh.visible = false;
    this.root.add(mesh);
    r.video = video;
    r.mesh = mesh;
  }

  private startAudio(r: Remote, stream: MediaStream) {
    // Chromium plays a remote WebRTC stream through Web Audio only while a
    // media element also holds it: a muted one does.
    const audio = h('audio', { muted: true, autoplay: true });
    audio.srcObject = stream;
    audio.play().catch(() => {});
    r.audio = audio;
    const ctx = this.audioContext();
    const src = ctx.createMediaStreamSource(stream);
    const panner = new PannerNode(ctx, { panningModel: 'HRTF', distanceModel: 'inverse', refDistance: 1, rolloffFactor: 1, maxDistance: 100 });
    const analyser = new AnalyserNode(ctx, { fftSize: LEVEL_WINDOW });
    src.connect(panner).connect(ctx.destination);
    panner.connect(analyser);
    r.nodes = [src, panner, analyser];
    r.panner = panner;
    r.analyser = analyser;
  }

  /**
   * The page's AudioContext, made on first use. Before the user's first
   * gesture it stays suspended (the gesture listeners resume it): a
   * resume() then is refused, with a console warning each time.
   */
  private audioContext(): AudioContext {
    if (!this.ctx) this.ctx = new AudioContext();
    if (this.ctx.state === 'suspended' && (navigator.userActivation?.hasBeenActive ?? true)) this.ctx.resume().catch(() => {});
    return this.ctx;
  }

  private dispose(r: Remote) {
    if (r.mesh) {
      this.root.remove(r.mesh);
      r.mesh.material.map?.dispose();
      r.mesh.material.dispose();
      r.mesh.geometry.dispose();
      r.avatar = standIn(`video:${r.mid}`, r.avatar, null, HEAD);
    }
    if (r.video) r.video.srcObject = null;
    if (r.audio) r.audio.srcObject = null;
    r.nodes?.forEach((n) => n.disconnect());
  }

  /** Places the video panels and the panners, and the listener at the camera. */
  private place() {
    const cam = (this.viewer.sceneEl as any).camera;
    if (!cam) return;
    cam.getWorldPosition(this.v);
    cam.getWorldQuaternion(this.q);
    const camPos = this.v.clone(), camQ = this.q.clone();
    if (this.ctx) {
      const l = this.ctx.listener;
      this.fwd.set(0, 0, -1).applyQuaternion(camQ);
      this.up.set(0, 1, 0).applyQuaternion(camQ);
      if (l.positionX) {
        const t = this.ctx.currentTime;
        l.positionX.setValueAtTime(camPos.x, t), l.positionY.setValueAtTime(camPos.y, t), l.positionZ.setValueAtTime(camPos.z, t);
        l.forwardX.setValueAtTime(this.fwd.x, t), l.forwardY.setValueAtTime(this.fwd.y, t), l.forwardZ.setValueAtTime(this.fwd.z, t);
        l.upX.setValueAtTime(this.up.x, t), l.upY.setValueAtTime(this.up.y, t), l.upZ.setValueAtTime(this.up.z, t);
      } else {
        // Firefox: no AudioParams on the listener
        l.setPosition(camPos.x, camPos.y, camPos.z);
        l.setOrientation(this.fwd.x, this.fwd.y, this.fwd.z, this.up.x, this.up.y, this.up.z);
      }
    }
    const now = performance.now();
    for (const r of this.remotes.values()) {
      const av = r.client ? avatarElement(r.client) : null;
      const head = av?.object3D;
      if (head) head.getWorldPosition(this.v);
      if (r.panner && this.ctx) {
        const p = head ? this.v : camPos;
        const t = this.ctx.currentTime;
        r.panner.positionX.setValueAtTime(p.x, t), r.panner.positionY.setValueAtTime(p.y, t), r.panner.positionZ.setValueAtTime(p.z, t);
      }
      if (!r.mesh || !r.video) continue;
      const live = !!r.client && now - r.lastFrame < VIDEO_STALE_MS && r.video.videoWidth > 0;
      if (!live) {
        r.mesh.visible = false;
        r.anchor = 'hidden';
        r.avatar = standIn(`video:${r.mid}`, r.avatar, null, HEAD);
        continue;
      }
      r.mesh.scale.set(PANEL_WIDTH, (PANEL_WIDTH * r.video.videoHeight) / r.video.videoWidth, 1);
      if (head) {
        r.mesh.position.copy(this.v);
        if (covered(av, 'body')) r.mesh.position.addScaledVector(this.right.set(1, 0, 0).applyQuaternion(camQ), BESIDE);
        r.anchor = 'avatar';
        r.avatar = standIn(`video:${r.mid}`, r.avatar, av, HEAD);
      } else {
        r.mesh.position.set(-2 - 0.8 * r.index, 1.6, -4);
        r.anchor = 'fallback';
        r.avatar = standIn(`video:${r.mid}`, r.avatar, null, HEAD);
      }
      r.mesh.quaternion.copy(camQ); // faces the viewer
      r.mesh.visible = true;
    }
  }

  private describe() {
    const s = this.stats();
    const cams = s.remote.filter((r) => r.kind === 'video' && r.anchor !== 'hidden').length;
    const mics = s.remote.filter((r) => r.kind === 'audio' && r.client).length;
    this.el.dataset.cameras = String(cams);
    this.el.dataset.microphones = String(mics);
    // the loudest microphone you hear, in dB below full scale
    const level = Math.max(0, ...s.remote.filter((r) => r.kind === 'audio' && r.client).map((r) => r.level));
    const db = level > 0 ? Math.max(LEVEL_FLOOR_DB, Math.round(20 * Math.log10(level))) : LEVEL_FLOOR_DB;
    const hearing = mics > 0 && this.ctx?.state === 'running';
    this.el.dataset.level = level.toFixed(4);
    this.levelRow.hidden = !hearing;
    this.meter.value = db - LEVEL_FLOOR_DB;
    this.levelRow.title = `Loudest microphone: ${db > LEVEL_FLOOR_DB ? db : `below ${LEVEL_FLOOR_DB}`} dB`;
    this.levelValue.textContent = db > LEVEL_FLOOR_DB ? `${db}\u00a0dB` : 'silent';
    // what a screen reader says of the meter: the level, not 0-60
    this.meter.setAttribute('aria-valuetext', db > LEVEL_FLOOR_DB ? `${db} dB` : 'silent');
    const parts = [];
    if (cams) parts.push(`${cams} camera${cams > 1 ? 's' : ''}`);
    if (mics) parts.push(`${mics} microphone${mics > 1 ? 's' : ''}`);
    if (this.ctx?.state === 'suspended' && mics) parts.push('click the page to hear them');
    const mine = [this.local.video.track ? 'camera' : '', this.local.audio.track ? 'microphone' : ''].filter(Boolean);
    const idle = mine.length ? `sharing your ${mine.join(' and ')}; nobody else is` : 'nobody is sharing';
    this.line.textContent = parts.length ? parts.join(' · ') : this.state === 'connected' ? idle : this.state;
  }

  /** What the page sends and receives (for tests and the console). */
  stats(): MediaStats {
    const buf = new Float32Array(LEVEL_WINDOW);
    return {
      state: this.state,
      microphone: this.local.audio.state,
      camera: this.local.video.state,
      audioContext: this.ctx?.state ?? 'none',
      remote: [...this.remotes.values()].map((r) => {
        let level = 0;
        if (r.analyser) {
          r.analyser.getFloatTimeDomainData(buf);
          let sum = 0;
          for (const x of buf) sum += x * x;
          level = Math.sqrt(sum / buf.length);
        }
        return { mid: r.mid, kind: r.kind, client: r.client ?? '', frames: r.frames, width: r.video?.videoWidth ?? 0, height: r.video?.videoHeight ?? 0, anchor: r.anchor, level };
      }),
    };
  }

  stop() {
    this.stopped = true;
    clearInterval(this.timer);
    for (const ev of GESTURES) removeEventListener(ev, this.resume);
    for (const l of Object.values(this.local)) {
      l.turn++;
      l.track?.stop();
      l.pending?.stop();
    }
    for (const r of this.remotes.values()) this.dispose(r);
    this.ctx?.close().catch(() => {});
  }
}

/** The audio and video feature of a viewer. */
export function mediaFeature(viewer: Viewer): MediaView {
  const q = new URLSearchParams(location.search);
  const n = (k: string, d: number) => (q.has(k) ? Math.max(0, Math.min(32, Number(q.get(k)) || 0)) : d);
  const view = new MediaView(viewer, n('audioslots', DEFAULT_AUDIO_SLOTS), n('videoslots', DEFAULT_VIDEO_SLOTS));
  (window as any).xrealm.media = view;
  addEventListener('pagehide', () => view.stop());
  return view;
}
