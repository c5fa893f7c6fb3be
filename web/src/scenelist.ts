// The scene list at /: the scenes the user may read, and a form that
// creates a scene in the signed-in user's namespace.

import mqtt from 'mqtt';
import { AuthError, identity, persistGet, sceneToken, signIn, signOut, storedTokenProblem } from './auth';
import { randomSuffix, SCENE_NAME_CHARS, SCENE_NAME_PATTERN, sceneNameError, topicFor } from './protocol';
import { h, showError, clearError } from './ui';

/**
 * Lists the public scenes (no token) and those the signed-in user's token
 * may read. refused is set when the server refused the token (signed by
 * another server, say): the list then holds the public scenes only.
 */
async function listScenes(): Promise<{ scenes: string[]; refused?: string }> {
  const me = identity();
  const token = localStorage.getItem('xrealm.token');
  const lists = await Promise.allSettled([
    persistGet<string[]>('!allscenes', null),
    me && !me.expired && token ? persistGet<string[]>('!allscenes', token) : Promise.resolve([]),
  ]);
  const out = new Set<string>();
  const errors: string[] = [];
  let refused: string | undefined;
  lists.forEach((l, i) => {
    if (l.status === 'fulfilled' && Array.isArray(l.value)) l.value.forEach((s) => typeof s === 'string' && out.add(s));
    else if (l.status === 'rejected') {
      const err = l.reason as Error;
      if (i === 1 && err instanceof AuthError && err.status === 401) refused = err.message;
      else errors.push(err.message);
    }
  });
  if (errors.length && out.size === 0) throw new Error(errors.join('; '));
  return { scenes: [...out].sort(), refused };
}

/** How long the server may take to acknowledge the scene-options object. */
export const CREATE_ACK_TIMEOUT_MS = 15_000;

/**
 * Creates a scene by storing its scene-options object: a scene exists in
 * xrealm once it has a persisted object. Resolves when the server stored it;
 * fails when the connection closes first (mqtt.js, which does not reconnect
 * here, would wait for the acknowledgement for ever) or no acknowledgement
 * comes within CREATE_ACK_TIMEOUT_MS.
 */
async function createScene(ns: string, scene: string): Promise<void> {
  const userClient = `xr-${randomSuffix(8)}`;
  const s = await sceneToken(ns, scene, userClient, `camera_${userClient}`);
  if (s.role !== 'editor') throw new Error(`your token may not edit ${ns}/${scene} (role ${s.role})`);
  const url = `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}/mqtt`;
  const c = mqtt.connect(url, { clientId: userClient, username: s.username, password: s.token, reconnectPeriod: 0, connectTimeout: 10_000 });
  // an error is followed by close, which each step below waits for too
  // (and an 'error' with no listener would be thrown)
  c.on('error', () => {});
  let timer: ReturnType<typeof setTimeout> | undefined;
  let acked = false;
  try {
    await new Promise<void>((resolve, reject) => {
      c.once('connect', () => resolve());
      c.once('error', reject);
      c.once('close', () => reject(new Error('the connection to the server closed before it was made')));
    });
    const base = `${s.realm}/s/${ns}/${scene}`;
    const stored = c.publishAsync(topicFor(base, 'o', userClient, 'scene-options'), JSON.stringify({
      object_id: 'scene-options', action: 'create', type: 'scene-options', persist: true,
      data: { 'scene-options': { sceneHeadModels: [] }, 'env-presets': { preset: 'none' } },
    }), { qos: 1 });
    stored.catch(() => {}); // (when the race below is lost)
    await Promise.race([
      stored.then(() => { acked = true; }),
      new Promise<never>((_, reject) => {
        if (!c.connected) reject(new Error('the connection to the server closed before it stored the scene'));
        c.once('close', () => reject(new Error('the connection to the server closed before it stored the scene')));
        timer = setTimeout(() => reject(new Error(`the server did not confirm within ${CREATE_ACK_TIMEOUT_MS / 1000} s that it stored the scene`)), CREATE_ACK_TIMEOUT_MS);
      }),
    ]);
  } finally {
    clearTimeout(timer);
    // A DISCONNECT only on a connection that is up and owes nothing:
    // end(false) waits for the acknowledgement of a publish in flight,
    // which a server that did not answer in time may never send.
    c.end(!acked || !c.connected);
  }
}

export async function startSceneList() {
  document.title = 'Scenes · xrealm';
  const app = document.getElementById('app')!;
  const me = identity();
  const list = h('ul', { id: 'scene-list', class: 'scene-list' }, h('li', {}, 'Loading…'));
  // A stored token that cannot be read (stored by an older client or by
  // hand): pages send it, and the server refuses it.
  const unreadable = me ? null : storedTokenProblem();
  const signOutButton = () => h('button', { id: 'sign-out', onclick: () => { signOut(); location.reload(); } }, 'Sign out');
  const tokenInput = h('input', { id: 'token-input', placeholder: 'paste a token from `xrealm token`', size: 40, 'aria-describedby': 'sign-in-msg' });
  const signInMsg = h('p', { id: 'sign-in-msg', class: 'error', 'aria-live': 'polite' });
  const signInForm = (lead: (Node | string)[]) => h('form', {
    id: 'sign-in',
    onsubmit: (e: Event) => {
      e.preventDefault();
      if (!tokenInput.value.trim()) return;
      const problem = signIn(tokenInput.value);
      if (problem) {
        tokenInput.setAttribute('aria-invalid', 'true');
        signInMsg.textContent = `That token was not stored: ${problem}.`;
        return;
      }
      location.reload();
    },
  }, ...lead, tokenInput, ' ', h('button', { type: 'submit' }, 'Sign in'), signInMsg);
  const signInBlock = me?.expired
    // the pages would send it, and the server refuses it: say so, and take a new one
    ? h('div', { id: 'token-expired', class: 'error' },
      h('p', {}, `Your sign-in token of ${me.user} expired ${me.expires!.toLocaleString()}, so the list holds the public scenes only and you cannot create scenes; scene pages refuse it too. `,
        'Sign in with a new token, or sign out to continue as a guest. ', signOutButton()),
      signInForm(['New token: ']))
    : me
    ? h('p', { id: 'signed-in' }, `Signed in as `, h('b', {}, me.user),
      me.expires ? ` (token ${me.expired ? 'expired' : 'valid until'} ${me.expires.toLocaleString()})` : '', ' ', signOutButton())
    : unreadable
      ? h('div', { id: 'token-unreadable' },
        h('p', {}, `A sign-in token is stored, but it cannot be used: ${unreadable}. Pages send it when they ask for a scene, and the server refuses it. `,
          'Sign out to continue as a guest, or sign in with a new token. ', signOutButton()),
        signInForm(['New token: ']))
      : signInForm(['You are a guest (anonymous viewer). To sign in, open any page with ', h('code', {}, '?token=<token>'), ' or paste one: ']);

  // The pattern and the message below say the server's rule
  // (topic.ValidSceneName); the form checks it itself (novalidate), so
  // that the message names the character refused.
  const nameInput = h('input', {
    id: 'new-scene-name', placeholder: 'scene name', pattern: SCENE_NAME_PATTERN, title: `A scene name: ${SCENE_NAME_CHARS}`,
    required: true, size: 16, 'aria-describedby': 'new-scene-msg',
    oninput: () => nameInput.removeAttribute('aria-invalid'),
  });
  const createMsg = h('span', { id: 'new-scene-msg', 'aria-live': 'polite' });
  const createButton = h('button', { type: 'submit', disabled: !me || me.expired }, 'Create scene');
  const createForm = h('form', {
    id: 'new-scene',
    novalidate: true,
    onsubmit: async (e: Event) => {
      e.preventDefault();
      const cur = identity();
      if (!cur) return;
      const name = nameInput.value.trim();
      const bad = sceneNameError('scene', name);
      if (bad) {
        nameInput.setAttribute('aria-invalid', 'true');
        createMsg.textContent = `Not a valid name: ${bad}.`;
        return;
      }
      createMsg.textContent = 'Creating…';
      createButton.disabled = true; // one scene at a time; the button comes back when it failed
      try {
        await createScene(cur.user, name);
        location.href = `/${encodeURIComponent(cur.user)}/${encodeURIComponent(name)}/edit`;
      } catch (err) {
        createMsg.textContent = `Could not create ${cur.user}/${name}: ${(err as Error).message}. Try again.`;
        createButton.disabled = false;
      }
    },
  }, me ? `New scene in ${me.user}/ ` : '', nameInput, createButton, createMsg);
  if (me?.expired) createForm.append(h('p', { class: 'hint' }, 'Your sign-in token expired: sign in with a new one to create scenes.'));
  if (!me) createForm.append(h('p', { class: 'hint' }, unreadable ? 'Sign in with a token that can be used to create scenes in your namespace.' : 'Sign in to create scenes in your namespace.'));

  app.replaceChildren(h('main', { class: 'page' },
    h('h1', {}, 'xrealm scenes'),
    signInBlock,
    h('section', {}, h('h2', {}, 'Create'), createForm),
    h('section', {}, h('h2', {}, 'Scenes you can open'), list),
    h('p', { class: 'hint' }, 'Any scene you may read opens at /namespace/scene, also before it has objects, e.g. ', h('a', { href: '/public/lobby' }, '/public/lobby'), '.'),
  ));
  try {
    const { scenes, refused } = await listScenes();
    clearError();
    if (refused) {
      list.before(h('div', { id: 'token-refused', class: 'error' },
        h('p', {}, `This server refused your sign-in token (${refused}): it may be signed by another server or revoked. `,
          'Only public scenes are listed. Sign out to continue as a guest, or sign in with a token from this server. ',
          h('button', { id: 'token-refused-sign-out', onclick: () => { signOut(); location.reload(); } }, 'Sign out'))));
    }
    list.replaceChildren(...(scenes.length ? scenes.map((s) => {
      const [ns, sc] = s.split('/');
      const path = `/${encodeURIComponent(ns)}/${encodeURIComponent(sc)}`;
      return h('li', { 'data-scene': s }, h('a', { href: path, class: 'scene-link' }, s), ' ', h('a', { href: `${path}/edit`, class: 'edit-link' }, 'edit'));
    }) : [h('li', {}, 'No scenes yet.')]));
  } catch (e) {
    list.replaceChildren(h('li', {}, 'Could not list scenes.'));
    showError(`Could not list scenes: ${(e as Error).message}`, [{ label: 'Retry', run: () => location.reload() }]);
  }
}
