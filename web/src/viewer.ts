// The scene page: A-Frame scene, connection, persisted state, live
// messages, presence, clicks and chat. The editor adds its panel on top.

import './aframe';
import { AuthError, identity, persistGet, setDisplayName, signOut, storedToken, storedTokenProblem, displayName, type SceneSession } from './auth';
import { Bus, type Status } from './bus';
import { Presence } from './presence';
import { renderOnDemand, type FrameStats } from './ondemand';
import { randomSuffix, topicFor, type Message, type SceneTopic, type StoredObject } from './protocol';
import { Renderer, SceneModel } from './scene';
import { clearError, h, keysToWalking, panelToggle, showError, toast } from './ui';

export interface Viewer {
  ns: string;
  scene: string;
  model: SceneModel;
  renderer: Renderer;
  presence: Presence;
  bus: Bus;
  sceneEl: HTMLElement;
  session(): SceneSession | null;
  /** Publishes on the scene's object topic of this client. */
  publishObject(m: Message): Promise<void>;
  reload(): Promise<void>;
  onSession(f: (s: SceneSession) => void): void;
  onLoaded(f: () => void): void;
  /** The connection gave up (sign-in refused and the like), with why; at once if it already has. */
  onFailed(f: (reason: string) => void): void;
  /** Frames drawn and skipped by rendering on demand (ondemand.ts), null with ?render=always. */
  frames: FrameStats | null;
}

/**
 * ?quality=low renders without antialiasing and at most 960 pixels wide or
 * high: for weak devices and software rendering (headless tests).
 */
function rendererSettings(): string {
  const low = new URLSearchParams(location.search).get('quality') === 'low';
  return low ? 'antialias: false; maxCanvasWidth: 960; maxCanvasHeight: 960; colorManagement: true' : 'antialias: true; colorManagement: true';
}

function sceneMarkup(camHeight: number): string {
  // Users start in front of the origin, facing it, spread over 6 × 3 m so
  // that two who join at once rarely stand in each other's avatar (two
  // random places are within 0.6 m of each other about 6 % of the time).
  const x = (Math.random() * 6 - 3).toFixed(2);
  const z = (1 + Math.random() * 3).toFixed(2);
  return `
  <a-scene id="xr-scene" renderer="${rendererSettings()}" cursor="rayOrigin: mouse; fuse: false"
      raycaster="objects: .clickable; far: 200" loading-screen="enabled: false" background="color: #a9cbe6"
      device-orientation-permission-ui="enabled: false" webxr="optionalFeatures: local-floor, hit-test"
      vr-mode-ui="enabled: true">
    <a-entity id="xr-rig">
      <a-entity id="xr-camera" camera position="${x} ${camHeight} ${z}" look-controls="pointerLockEnabled: false"
          wasd-controls="acceleration: 30" xr-camera-pose></a-entity>
      <a-entity laser-controls="hand: left; model: false" raycaster="objects: .clickable; far: 200"></a-entity>
      <a-entity laser-controls="hand: right; model: false" raycaster="objects: .clickable; far: 200"></a-entity>
    </a-entity>
    <a-entity id="xr-floor" geometry="primitive: plane; width: 80; height: 80; segmentsWidth: 40; segmentsHeight: 40" rotation="-90 0 0"
        material="color: #6f8f72; roughness: 1" hide-on-enter-ar></a-entity>
    <a-entity id="xr-objects"></a-entity>
    <a-entity id="xr-avatars"></a-entity>
  </a-scene>`;
}

function statusText(s: Status): string {
  switch (s.state) {
    case 'connecting':
      return s.attempt > 1 ? `Connecting (attempt ${s.attempt})…` : 'Connecting…';
    case 'connected':
      return 'Connected';
    case 'reconnecting':
      return `Disconnected (${s.reason}); reconnecting in ${s.inSeconds}s…`;
    case 'failed':
      return 'Not connected';
  }
}

export async function startViewer(ns: string, scene: string, mode: 'view' | 'edit', camHeight: number): Promise<Viewer> {
  document.title = `${ns}/${scene} · xrealm`;
  const app = document.getElementById('app')!;
  const statusEl = h('span', { id: 'xr-status', class: 'status connecting', 'data-state': 'connecting' }, 'Connecting…');
  const whoEl = h('span', { id: 'xr-who' });
  const me = identity();
  // Sign out whenever a token is stored, also one that cannot be read
  // (identity() is null then): every token request sends it.
  const unreadable = storedTokenProblem();
  const signOutButton = storedToken()
    ? h('button', {
      id: 'xr-sign-out',
      title: unreadable ? `The stored sign-in token cannot be used: ${unreadable}. Sign out to continue as a guest.` : 'Forget the stored sign-in token and continue as a guest',
      onclick: () => { signOut(); location.reload(); },
    }, 'Sign out')
    : null;
  const nameInput = h('input', {
    id: 'xr-name', value: displayName(), title: 'Your display name', maxlength: 40, size: 12,
    disabled: !!me,
    onchange: () => {
      setDisplayName(nameInput.value.trim() || displayName());
      toast('Display name saved; it is used from the next reconnection or page load.');
    },
  });
  const otherMode = mode === 'view'
    ? h('a', { href: `/${ns}/${scene}/edit`, id: 'xr-to-edit' }, 'Edit')
    : h('a', { href: `/${ns}/${scene}`, id: 'xr-to-view' }, 'View only');
  const top = h('header', { id: 'xr-top' },
    h('a', { href: '/', class: 'brand' }, 'xrealm'),
    h('span', { class: 'scene-name' }, `${ns}/${scene}`),
    statusEl, whoEl, me ? null : nameInput, otherMode,
    signOutButton,
    panelToggle('side', 'Panel', 'Show or hide the side panel'),
  );
  const usersEl = h('ul', { id: 'xr-users' });
  const chatLog = h('div', { id: 'xr-chat-log', 'aria-live': 'polite' });
  const chatInput = h('input', { id: 'xr-chat-input', placeholder: 'Say something…', maxlength: 500, disabled: true });
  const chatForm = h('form', { id: 'xr-chat-form' }, chatInput, h('button', { type: 'submit' }, 'Send'));
  const side = h('aside', { id: 'xr-side' },
    h('section', {}, h('h3', {}, 'People here'), usersEl),
    h('section', { id: 'xr-chat' }, h('h3', {}, 'Chat'), chatLog, chatForm),
    h('p', { class: 'hint' }, matchMedia('(pointer: coarse)').matches ? 'Drag to look, tap objects that listen.' : 'Drag to look, WASD or the arrow keys to move (Escape leaves a text field), click objects that listen.'),
  );
  const holder = h('div', { id: 'xr-scene-holder' });
  holder.innerHTML = sceneMarkup(camHeight);
  app.replaceChildren(top, holder, side);
  document.body.classList.add(mode === 'edit' ? 'mode-edit' : 'mode-view');
  keysToWalking();

  const sceneEl = holder.querySelector('a-scene') as HTMLElement & { hasLoaded?: boolean };
  if (!sceneEl.hasLoaded) await new Promise((r) => sceneEl.addEventListener('loaded', r, { once: true }));
  // ?render=always: every frame drawn, as A-Frame does (to compare);
  // ?render=changes: only frames that show a change (no idle draw), so that
  // a test sees what a change does not draw
  const renderMode = new URLSearchParams(location.search).get('render');
  const frames = renderMode === 'always' ? null : renderOnDemand(sceneEl, renderMode === 'changes' ? Infinity : undefined);
  const objectsRoot = sceneEl.querySelector('#xr-objects') as HTMLElement;
  const camera = sceneEl.querySelector('#xr-camera') as HTMLElement;

  const model = new SceneModel();
  const renderer = new Renderer(model, objectsRoot);
  const userClient = `xr-${randomSuffix(8)}`;
  const camid = `camera_${userClient}`;
  let session: SceneSession | null = null;
  let loading = true;
  let buffer: Message[] = [];
  /** Connections begun: a load that ends after the next one began leaves its hold alone. */
  let generation = 0;
  const sessionListeners: ((s: SceneSession) => void)[] = [];
  const loadedListeners: (() => void)[] = [];
  const failedListeners: ((reason: string) => void)[] = [];
  let failedReason: string | null = null; // for a listener added after the failure

  const send = (topic: string, m: Message) => {
    bus.publish(topic, m).catch((e) => console.debug('xrealm: not sent:', e.message));
  };
  const presence = new Presence(sceneEl.querySelector('#xr-avatars') as HTMLElement, camera, send);
  presence.onChange(() => {
    const list = [...presence.users.values()].sort((a, b) => (a.me ? -1 : b.me ? 1 : a.displayName.localeCompare(b.displayName)));
    usersEl.replaceChildren(...list.map((u) => h('li', { 'data-user-client': u.userClient },
      h('span', { class: 'dot', style: `background:${u.color}` }), u.displayName + (u.me ? ' (you)' : ''))));
  });

  /**
   * Loads the stored objects. With g, the load of connection g: when
   * another connection began while it read them (its own load is then
   * under way, or done), it applies nothing and shows nothing (its
   * snapshot may be older than that load's, and its failure is not
   * that connection's); Retry loads without one.
   */
  const reload = async (g?: number) => {
    const s = session;
    if (!s) return;
    const stale = () => g !== undefined && g !== generation;
    try {
      const objs = await persistGet<StoredObject[]>(`${encodeURIComponent(ns)}/${encodeURIComponent(scene)}`, s.token);
      if (stale()) return;
      if (!Array.isArray(objs)) throw new Error('persisted scene is not a JSON array');
      model.load(objs);
    } catch (e) {
      if (stale()) {
        console.debug('xrealm: a load of an earlier connection failed (left alone):', e);
        return;
      }
      console.error('xrealm: loading the persisted scene failed', e);
      showError(`Could not load the scene's objects: ${(e as Error).message}`, [{ label: 'Retry', run: () => { clearError(); reload(); } }]);
    }
  };

  const chat = (t: SceneTopic, m: Message) => {
    const d = m.data ?? {};
    if (typeof d.text !== 'string') return;
    const name = typeof d.displayName === 'string' ? d.displayName : t.userClient;
    chatLog.append(h('div', { class: 'chat-line' + (t.userClient === userClient ? ' mine' : '') },
      h('b', {}, name.slice(0, 60) + ': '), d.text.slice(0, 1000)));
    while (chatLog.childElementCount > 200) chatLog.firstElementChild!.remove();
    chatLog.scrollTop = chatLog.scrollHeight;
  };

  const bus: Bus = new Bus(ns, scene, userClient, camid, {
    presence: (s) => presence.presenceMessages(s),
    onStatus: (s) => {
      statusEl.textContent = statusText(s);
      statusEl.title = statusEl.textContent; // the bar may cut it short on a narrow screen
      statusEl.className = `status ${s.state}`;
      statusEl.dataset.state = s.state;
      chatInput.disabled = s.state !== 'connected';
      if (s.state === 'connecting') {
        generation++;
        loading = true;
        buffer = [];
      }
      if (s.state === 'failed') {
        failedReason = s.reason;
        failedListeners.forEach((f) => f(s.reason));
        const actions = storedToken() ? [{ label: 'Sign out and continue as guest', run: () => { signOut(); location.reload(); } }] : [];
        showError(s.reason, actions);
      }
    },
    onConnected: async (s, first, renewed) => {
      session = s;
      presence.setSession(s);
      whoEl.textContent = `${s.signedIn ? s.username : s.displayName} · ${s.role}`;
      whoEl.dataset.role = s.role;
      sessionListeners.forEach((f) => f(s));
      // (before the load: a load that fails says so in the banner, with Retry)
      clearError();
      const g = generation;
      await reload(g);
      // Another connection began meanwhile: what is held now waits for its
      // load (taking messages live again here, before that load, let its
      // older snapshot undo them).
      if (g !== generation) return;
      for (const m of buffer) {
        // one that cannot be applied is dropped, as a live one is (Bus.receive), and counted and logged as one
        try {
          model.apply(m);
        } catch (e) {
          bus.notApplied(m.object_id, e);
        }
      }
      buffer = [];
      loading = false;
      if (!first && !renewed) toast('Reconnected; the scene was reloaded.');
      loadedListeners.forEach((f) => f());
      sceneEl.dataset.loaded = 'true';
    },
    onMessage: (t, m) => {
      switch (t.msgType) {
        case 'o':
          if (m.action === 'create' || m.action === 'update' || m.action === 'delete') {
            if (loading) buffer.push(m);
            else model.apply(m);
          }
          break;
        case 'u':
        case 'x':
          presence.handle(t, m);
          break;
        case 'c':
          chat(t, m);
          break;
      }
    },
  });

  chatForm.addEventListener('submit', (e) => {
    e.preventDefault();
    const text = chatInput.value.trim();
    const s = session;
    if (!text || !s) return;
    const base = `${s.realm}/s/${s.namespace}/${s.scene}`;
    bus.publish(topicFor(base, 'c', s.userClient, s.userClient), {
      object_id: s.userClient, action: 'create', type: 'chat', data: { text, displayName: s.displayName, userid: s.username },
    }).then(() => (chatInput.value = ''), (err) => toast(`Chat not sent: ${err.message}`, 'error'));
  });

  // Clicks on objects with click-listener become clientEvents.
  const camPos = () => {
    const p = presence['pos'];
    return { x: +p.x.toFixed(3), y: +p.y.toFixed(3), z: +p.z.toFixed(3) };
  };
  for (const type of ['mousedown', 'mouseup']) {
    sceneEl.addEventListener(type, (e: Event) => {
      const target = e.target as HTMLElement;
      const id = target?.dataset?.objectId;
      const s = session;
      if (!id || !s || !target.classList.contains('clickable')) return;
      const pt = (e as CustomEvent).detail?.intersection?.point;
      const position = pt ? { x: +pt.x.toFixed(3), y: +pt.y.toFixed(3), z: +pt.z.toFixed(3) } : camPos();
      const base = `${s.realm}/s/${s.namespace}/${s.scene}`;
      send(topicFor(base, 'o', s.userClient, id), {
        object_id: id, action: 'clientEvent', type,
        data: { clickPos: camPos(), position, source: s.camid },
      });
    });
  }

  const viewer: Viewer = {
    ns, scene, model, renderer, presence, bus, sceneEl, frames,
    session: () => session,
    publishObject: (m) => {
      const s = session;
      if (!s) return Promise.reject(new Error('not connected'));
      const base = `${s.realm}/s/${s.namespace}/${s.scene}`;
      return bus.publish(topicFor(base, 'o', s.userClient, m.object_id), m);
    },
    reload,
    onSession: (f) => sessionListeners.push(f),
    onLoaded: (f) => loadedListeners.push(f),
    onFailed: (f) => {
      failedListeners.push(f);
      if (failedReason !== null) f(failedReason);
    },
  };
  (window as any).xrealm = viewer;

  addEventListener('pagehide', () => {
    presence.stop();
    bus.stop(presence.leaveMessage());
  });
  bus.start();
  return viewer;
}

export { AuthError };
