// Presence: my camera pose out (at most 10 Hz while moving, a 1 s heartbeat,
// with a ttl), other users' avatars in (smoothed), join/leave messages and
// the user list.

import { AFRAME, THREE } from './aframe';
import type { SceneSession } from './auth';
import { isObject, topicFor, type Message, type SceneTopic } from './protocol';

export const POSE_MIN_INTERVAL_MS = 100; // 10 Hz
export const HEARTBEAT_MS = 1000;
export const POSE_TTL_S = 5;
/**
 * The longest ttl a pose is taken with (ARENA's clients send 30): a
 * sender's ttl keeps it in the user list after its last pose, and one of
 * years would keep a user who left without a leave message (a crash that
 * lost its will) listed for good.
 */
export const MAX_POSE_TTL_S = 30;
/**
 * An avatar whose user sent no pose for this long is not drawn (the user
 * stays in the list until the pose's ttl): everyone sends a heartbeat pose
 * every second, so silence means that the sender left this page's interest
 * set in an interest-managed scene, or stalled. Its next pose draws it again.
 */
export const AVATAR_STALE_MS = 2.5 * HEARTBEAT_MS;

export interface User {
  userClient: string;
  camid?: string;
  displayName: string;
  color: string;
  me: boolean;
  expires: number; // ms epoch; Infinity for me
}

function colorFor(s: string): string {
  let h = 0;
  for (const c of s) h = (h * 31 + c.charCodeAt(0)) >>> 0;
  return `hsl(${h % 360}, 70%, 55%)`;
}

/**
 * Name tags: a tag keeps the size on screen that it has at ref metres
 * from the camera (its world size grows with distance), within min and
 * max times its own size, so that it is readable from across a room and
 * not huge up close. Its bottom stays just above the head.
 */
export const NAMETAG = { ref: 3, min: 0.5, max: 4, bottom: 0.26 };

/** The scale of a name tag seen from distance metres. */
export function nametagScale(distance: number): number {
  return Math.min(NAMETAG.max, Math.max(NAMETAG.min, distance / NAMETAG.ref));
}

/** xr-nametag: turns the tag to the camera and scales it with the distance (NAMETAG). */
AFRAME.registerComponent('xr-nametag', {
  init(this: any) {
    this.q = new THREE.Quaternion();
    this.pq = new THREE.Quaternion();
    this.cp = new THREE.Vector3();
    this.p = new THREE.Vector3();
  },
  tick(this: any) {
    const cam = this.el.sceneEl?.camera;
    if (!cam) return;
    const o = this.el.object3D;
    cam.getWorldQuaternion(this.q);
    o.parent.getWorldQuaternion(this.pq);
    o.quaternion.copy(this.pq.invert().multiply(this.q));
    const s = nametagScale(cam.getWorldPosition(this.cp).distanceTo(o.getWorldPosition(this.p)));
    o.scale.setScalar(s);
    const mesh = this.el.getObject3D('xr-text');
    if (mesh) o.position.y = NAMETAG.bottom + (s * mesh.scale.y) / 2;
  },
});

export class Presence {
  readonly users = new Map<string, User>();
  private avatars = new Map<string, HTMLElement>();
  private lastPose = new Map<string, number>(); // ms epoch of each user's last pose
  private lastSent = 0;
  private lastPos = new THREE.Vector3(Infinity, 0, 0);
  private lastQuat = new THREE.Quaternion();
  private pos = new THREE.Vector3();
  private quat = new THREE.Quaternion();
  private timers: ReturnType<typeof setInterval>[] = [];
  private listeners: (() => void)[] = [];
  session: SceneSession | null = null;

  constructor(
    private root: HTMLElement,
    camera: HTMLElement,
    private send: (topic: string, m: Message) => void,
  ) {
    (camera as any).components['xr-camera-pose'].onPose = (p: any, q: any) => {
      this.pos.copy(p);
      this.quat.copy(q);
      const moved = p.distanceToSquared(this.lastPos) > 1e-6 || Math.abs(q.dot(this.lastQuat)) < 1 - 1e-7;
      if (moved && performance.now() - this.lastSent >= POSE_MIN_INTERVAL_MS) this.sendPose();
    };
    // The heartbeat runs on a timer, so it goes on when frames stop (a hidden tab).
    this.timers.push(setInterval(() => {
      if (performance.now() - this.lastSent >= HEARTBEAT_MS - 50) this.sendPose();
    }, 250));
    this.timers.push(setInterval(() => this.expire(), 500));
  }

  onChange(f: () => void) {
    this.listeners.push(f);
  }

  private changed() {
    for (const f of this.listeners) f();
  }

  private base(): string | null {
    const s = this.session;
    return s ? `${s.realm}/s/${s.namespace}/${s.scene}` : null;
  }

  setSession(s: SceneSession) {
    this.session = s;
    this.users.set(s.userClient, {
      userClient: s.userClient, camid: s.camid, displayName: s.displayName, color: colorFor(s.userClient), me: true, expires: Infinity,
    });
    this.changed();
  }

  presenceMessages(s: SceneSession): { join: [string, Message]; will: [string, Message] } {
    const base = `${s.realm}/s/${s.namespace}/${s.scene}`;
    const t = topicFor(base, 'x', s.userClient, s.userClient);
    const data = { displayName: s.displayName, camid: s.camid, userid: s.username };
    return {
      join: [t, { object_id: s.userClient, action: 'join', type: 'arena-presence', data }],
      will: [t, { object_id: s.userClient, action: 'leave', type: 'arena-presence', data }],
    };
  }

  private sendPose() {
    const s = this.session;
    const base = this.base();
    if (!s || !base || !isFinite(this.pos.x)) return;
    this.lastSent = performance.now();
    this.lastPos.copy(this.pos);
    this.lastQuat.copy(this.quat);
    const r = (v: number) => Math.round(v * 1e4) / 1e4;
    this.send(topicFor(base, 'u', s.userClient, s.camid), {
      object_id: s.camid,
      action: 'update',
      type: 'object',
      ttl: POSE_TTL_S,
      data: {
        object_type: 'camera',
        position: { x: r(this.pos.x), y: r(this.pos.y), z: r(this.pos.z) },
        rotation: { x: r(this.quat.x), y: r(this.quat.y), z: r(this.quat.z), w: r(this.quat.w) },
        displayName: s.displayName,
        color: colorFor(s.userClient),
        userid: s.username,
      },
    });
  }

  /** Handles x and u messages. */
  handle(t: SceneTopic, m: Message) {
    if (!this.session || t.userClient === this.session.userClient) return;
    const d = m.data ?? {};
    const name = typeof d.displayName === 'string' ? d.displayName.slice(0, 60) : t.userClient;
    if (t.msgType === 'x') {
      if (m.action === 'leave') {
        this.remove(t.userClient);
      } else if (m.action === 'join') {
        const u = this.users.get(t.userClient);
        this.users.set(t.userClient, {
          userClient: t.userClient, camid: typeof d.camid === 'string' ? d.camid : u?.camid, displayName: name,
          color: u?.color ?? colorFor(t.userClient), me: false, expires: Math.max(u?.expires ?? 0, Date.now() + 10_000),
        });
        this.changed();
      }
      return;
    }
    if (t.msgType !== 'u' || d.object_type !== 'camera') return;
    if (m.action === 'delete' || m.action === 'leave') {
      this.remove(t.userClient);
      return;
    }
    if (!isObject(d.position)) return;
    const p = d.position, rq = isObject(d.rotation) ? d.rotation : {};
    const pos = { x: Number(p.x) || 0, y: Number(p.y) || 0, z: Number(p.z) || 0 };
    let q = { x: 0, y: 0, z: 0, w: 1 };
    if (typeof rq.w === 'number') q = { x: Number(rq.x) || 0, y: Number(rq.y) || 0, z: Number(rq.z) || 0, w: rq.w };
    else if (typeof rq.x === 'number') {
      const e = new THREE.Euler(THREE.MathUtils.degToRad(Number(rq.x) || 0), THREE.MathUtils.degToRad(Number(rq.y) || 0), THREE.MathUtils.degToRad(Number(rq.z) || 0), 'YXZ');
      const qq = new THREE.Quaternion().setFromEuler(e);
      q = { x: qq.x, y: qq.y, z: qq.z, w: qq.w };
    }
    const ttl = typeof m.ttl === 'number' && m.ttl > 0 ? Math.min(m.ttl, MAX_POSE_TTL_S) : POSE_TTL_S;
    const color = typeof d.color === 'string' && /^(#[0-9a-fA-F]{3,8}|hsl\([\d.,% ]+\)|[a-z]+)$/.test(d.color) ? d.color : colorFor(t.userClient);
    const known = this.users.get(t.userClient);
    this.lastPose.set(t.userClient, Date.now());
    this.users.set(t.userClient, { userClient: t.userClient, camid: t.id, displayName: name, color, me: false, expires: Date.now() + ttl * 1000 });
    let av = this.avatars.get(t.userClient);
    if (!av) {
      av = this.makeAvatar(t.userClient, name, color);
      this.avatars.set(t.userClient, av);
    } else if (av.dataset.displayName !== name) {
      av.dataset.displayName = name;
      (av.querySelector('[data-role="nametag"]') as any)?.setAttribute('xr-text', 'value', name);
    }
    const sm = (av as any).components?.['xr-smooth'];
    if (sm) sm.setTarget(pos, q);
    else (av as any).__pending = [pos, q];
    if (!known || known.displayName !== name || known.me) this.changed();
  }

  private makeAvatar(userClient: string, name: string, color: string): HTMLElement {
    const av = document.createElement('a-entity');
    av.dataset.avatarFor = userClient;
    av.dataset.displayName = name;
    av.setAttribute('xr-smooth', '');
    av.innerHTML = `
      <a-entity data-role="head" geometry="primitive: sphere; radius: 0.18" material="color: ${color}; roughness: 0.6"></a-entity>
      <a-entity data-role="visor" geometry="primitive: box; width: 0.22; height: 0.07; depth: 0.08" position="0 0.03 -0.15" material="color: #222"></a-entity>
      <a-entity data-role="body" geometry="primitive: cone; radiusBottom: 0.22; radiusTop: 0.05; height: 0.5" position="0 -0.55 0" material="color: ${color}; opacity: 0.6; transparent: true"></a-entity>
      <a-entity data-role="nametag" position="0 0.38 0" xr-nametag></a-entity>`;
    const tag = av.querySelector('[data-role="nametag"]') as any;
    tag.setAttribute('xr-text', { value: name, color: '#ffffff', background: 'rgba(0,0,0,0.55)', width: 0.7, fontSize: 48 });
    av.addEventListener('loaded', () => {
      const p = (av as any).__pending;
      if (p) (av as any).components['xr-smooth'].setTarget(p[0], p[1]);
    });
    this.root.appendChild(av);
    return av;
  }

  private undraw(userClient: string) {
    const av = this.avatars.get(userClient);
    if (av) av.remove();
    this.avatars.delete(userClient);
  }

  private remove(userClient: string) {
    this.undraw(userClient);
    this.lastPose.delete(userClient);
    if (this.users.delete(userClient)) this.changed();
  }

  private expire() {
    const now = Date.now();
    for (const u of [...this.users.values()]) {
      if (u.me) continue;
      if (u.expires < now) this.remove(u.userClient);
      else if (now - (this.lastPose.get(u.userClient) ?? now) > AVATAR_STALE_MS) this.undraw(u.userClient);
    }
  }

  leaveMessage(): [string, Message] | undefined {
    return this.session ? this.presenceMessages(this.session).will : undefined;
  }

  stop() {
    this.timers.forEach(clearInterval);
  }
}

/** The avatar entity drawn for an ARENA client, if there is one now. */
export function avatarElement(userClient: string): any {
  return document.querySelector(`#xr-avatars [data-avatar-for="${CSS.escape(userClient)}"]`);
}

/**
 * Moves a stand-in (a point cloud, a video panel), named by holder, from
 * one avatar to another: the parts named by data-role of the avatar it
 * leaves show again unless another stand-in still covers them, those of
 * the avatar it goes to hide (the name tag stays). Either avatar may be
 * null. Returns to.
 */
export function standIn(holder: string, from: any, to: any, roles: readonly string[]): any {
  if (from === to) return to;
  for (const [av, on] of [[from, false], [to, true]]) {
    if (!av) continue;
    const by: Map<string, Set<string>> = (av.__standIns ??= new Map());
    for (const role of roles) {
      const set = by.get(role) ?? new Set<string>();
      by.set(role, set);
      if (on) set.add(holder);
      else set.delete(holder);
      const o = av.querySelector(`[data-role="${role}"]`)?.object3D;
      if (o) o.visible = set.size === 0;
    }
  }
  return to;
}

/** Whether a stand-in covers the avatar's part role. */
export function covered(av: any, role: string): boolean {
  return (av?.__standIns?.get(role)?.size ?? 0) > 0;
}
