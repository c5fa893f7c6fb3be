// End-to-end tests: Debian's Chromium (headless, driven by playwright-core)
// against a real `xrealm serve`, with Python paho-mqtt (web/test/pypub.py, from
// the .venv that ./scripts/test.sh makes) as the third party that creates objects.
import { execFileSync, spawn } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { MARK_OFF, MARK_ON, REPO_DIR, launchBrowser, mqttClient, pythonPublisher, startServer, toggleMark, waitFor, xrealmBin, type PythonPublisher, type XrealmServer } from './harness';

let srv: XrealmServer;
let browser: Browser;
let bot: PythonPublisher; // the third client (Python paho-mqtt): an editor of the public test scenes
const pages: Page[] = [];
const warnings = new Map<Page, string[]>();

beforeAll(async () => {
  srv = await startServer();
  browser = await launchBrowser();
  bot = await pythonPublisher(srv, 'bot', srv.token('bot', 'public/objects', 'editor'), 'pyClient-000001');
}, 600_000);

// Pages a test hands to the next one; every other page is closed after each
// test, passed or failed, so that failures do not slow the rest down.
const keep = new Set<Page>();
/** Console warnings and errors a test expects of a page (the rest fail the test). */
const expected = new Map<Page, RegExp[]>();
const expectConsole = (p: Page, ...r: RegExp[]) => expected.set(p, [...(expected.get(p) ?? []), ...r]);
/**
 * What any page may say: Chromium without a GPU composites the WebGL canvas
 * in software, reading its pixels back, and says so.
 */
const ALWAYS = [/GPU stall due to ReadPixels/];
afterEach(async () => {
  const unexpected: string[] = [];
  for (const p of pages.splice(0)) {
    if (keep.has(p)) {
      pages.push(p);
      continue;
    }
    if (!p.isClosed()) await p.context().close();
    const allowed = [...ALWAYS, ...(expected.get(p) ?? [])];
    for (const w of warnings.get(p) ?? []) if (!allowed.some((r) => r.test(w))) unexpected.push(w);
  }
  // Every page of a test is clean: no uncaught error, no warning or error
  // on the console but those the test causes on purpose.
  expect(unexpected.join('\n'), 'console warnings and errors').toBe('');
});

afterAll(async () => {
  bot?.end();
  await browser?.close();
  await srv?.stop();
});

/** A new page in a context of its own, whose console warnings and errors are kept in warnings. */
async function newPage(opts: { width?: number; height?: number } = {}): Promise<Page> {
  const ctx = await browser.newContext({ viewport: { width: opts.width ?? 480, height: opts.height ?? 300 } });
  const page = await ctx.newPage();
  pages.push(page);
  const w: string[] = [];
  warnings.set(page, w);
  page.on('console', (m) => {
    if (m.type() === 'warning' || m.type() === 'error') w.push(`${m.type()}: ${m.text()} (${m.location().url})`);
  });
  page.on('pageerror', (e) => w.push(`pageerror: ${e.message}`));
  return page;
}

/** Opens a page on path and waits until the scene is loaded (unless loaded is false). */
async function open(path: string, opts: { width?: number; height?: number; quality?: 'high' | 'low'; loaded?: boolean } = {}): Promise<Page> {
  const page = await newPage(opts);
  await page.goto(srv.url + path + (opts.quality === 'high' ? '' : (path.includes('?') ? '&' : '?') + 'quality=low'));
  if (path !== '/' && !path.startsWith('/?') && opts.loaded !== false) {
    await page.waitForSelector('a-scene[data-loaded="true"]', { state: 'attached', timeout: 30_000 });
  }
  return page;
}

async function close(page: Page) {
  await page.context().close();
}

const session = (p: Page) => p.evaluate(() => (window as any).xrealm.session());

/** World position of a DOM entity, read from its object3D. */
const worldPos = (p: Page, selector: string) =>
  p.evaluate((sel) => {
    const el = document.querySelector(sel) as any;
    if (!el?.object3D) return null;
    el.object3D.updateMatrixWorld(true);
    const v = el.object3D.getWorldPosition(new el.object3D.position.constructor());
    return { x: v.x, y: v.y, z: v.z };
  }, selector);

async function persisted(ns: string, scene: string, token?: string): Promise<any[]> {
  const r = await fetch(`${srv.url}/persist/${ns}/${scene}`, { headers: token ? { Authorization: `Bearer ${token}` } : {} });
  expect(r.status).toBe(200);
  return r.json();
}

function publish(scene: string, m: Record<string, unknown>, qos: 0 | 1 = 1) {
  return bot.publishAsync(`realm/s/public/${scene}/o/pyClient-000001/${m.object_id}`, JSON.stringify(m), { qos });
}

/** Decodes a PNG screenshot in the browser and returns the share of pixels in a centred box that match. */
async function pixelShare(p: Page, png: Buffer, match: 'red' | 'blue', at: { x: number; y: number }, box = 24): Promise<number> {
  return p.evaluate(async ({ b64, match, box, at }) => {
    const img = new Image();
    img.src = `data:image/png;base64,${b64}`;
    await img.decode();
    const c = document.createElement('canvas');
    c.width = img.width;
    c.height = img.height;
    const ctx = c.getContext('2d')!;
    ctx.drawImage(img, 0, 0);
    const d = ctx.getImageData(Math.floor(at.x - box / 2), Math.floor(at.y - box / 2), box, box).data;
    let n = 0;
    for (let i = 0; i < d.length; i += 4) {
      const [r, g, bl] = [d[i], d[i + 1], d[i + 2]];
      if (match === 'red' ? r > 180 && g < 70 && bl < 70 : bl > 180 && r < 70 && g < 70) n++;
    }
    return n / (d.length / 4);
  }, { b64: png.toString('base64'), match, box, at });
}

/** Where an entity's centre is on the page, in CSS pixels, through the scene's camera. */
const screenPoint = (p: Page, selector: string) =>
  p.evaluate((sel) => {
    const el = document.querySelector(sel) as any;
    const cam = (document.querySelector('a-scene') as any).camera;
    const v = el.object3D.getWorldPosition(new el.object3D.position.constructor()).project(cam);
    const r = (document.querySelector('a-scene canvas') as HTMLCanvasElement).getBoundingClientRect();
    return { x: r.left + ((v.x + 1) / 2) * r.width, y: r.top + ((1 - v.y) / 2) * r.height };
  }, selector);

/** Places the page's camera (the user walks there). */
const placeCamera = (p: Page, x: number, y: number, z: number) =>
  p.evaluate(([x, y, z]) => (document.querySelector('#xr-camera') as any).setAttribute('position', `${x} ${y} ${z}`), [x, y, z]);

/** Waits until the screenshot shows the colour where the entity is; keeps the last screenshot for a failure. */
async function waitForColour(p: Page, match: 'red' | 'blue', what: string, selector = '[data-object-id="redbox"]') {
  let last: Buffer | undefined;
  try {
    await waitFor(what, async () => (await pixelShare(p, (last = await p.screenshot()), match, await screenPoint(p, selector))) > 0.9);
  } catch (e) {
    mkdirSync(join(REPO_DIR, 'web', 'test-results'), { recursive: true });
    if (last) writeFileSync(join(REPO_DIR, 'web', 'test-results', `failed-${match}.png`), last);
    throw e;
  }
}

describe('presence', () => {
  it('two pages see each other as moving avatars and chat; leaving removes the avatar', async () => {
    const a = await open('/public/meeting');
    const b = await open('/public/meeting');
    const [sa, sb] = [await session(a), await session(b)];
    await waitFor('A sees B', () => a.$(`[data-avatar-for="${sb.userClient}"]`));
    await waitFor('B sees A', () => b.$(`[data-avatar-for="${sa.userClient}"]`));
    await waitFor('user list', async () => (await a.textContent('#xr-users'))?.includes(sb.displayName));
    expect(await b.getAttribute(`[data-avatar-for="${sa.userClient}"]`, 'data-display-name')).toBe(sa.displayName);

    // Chat, shown as text.
    await a.fill('#xr-chat-input', 'hello from A <b>not bold</b>');
    await a.press('#xr-chat-input', 'Enter');
    await waitFor('chat shown in B', async () => (await b.textContent('#xr-chat-log'))?.includes('hello from A <b>not bold</b>'));
    expect(await b.$('#xr-chat-log b b')).toBeNull();
    await a.focus('#xr-to-edit');

    const before = (await worldPos(a, `[data-avatar-for="${sb.userClient}"]`))!;
    expect(Math.abs(before.y - 1.6)).toBeLessThan(0.05);
    // B walks forward (-z) with the keyboard.
    await b.keyboard.down('w');
    await b.waitForTimeout(700);
    await b.keyboard.up('w');
    const moved = await waitFor('avatar moved', async () => {
      const p = await worldPos(a, `[data-avatar-for="${sb.userClient}"]`);
      return p && before.z - p.z > 0.3 ? p : null;
    });
    // Interpolated: it arrives where B's camera is.
    await waitFor('avatar settles where B is', async () => {
      const camB = (await worldPos(b, '#xr-camera'))!;
      const p = (await worldPos(a, `[data-avatar-for="${sb.userClient}"]`))!;
      return Math.abs(p.z - camB.z) < 0.05 && Math.abs(p.x - camB.x) < 0.05;
    });
    expect(moved.z).toBeLessThan(before.z);

    // Leaving: the avatar goes at once (not after the ttl).
    const t0 = Date.now();
    await close(b);
    // Both, by B's leave: its avatar alone also goes when B sent no pose for
    // 2.5 s (AVATAR_STALE_MS), which may come first on a loaded machine,
    // while B stays in the list until its pose's ttl (5 s).
    await waitFor('avatar removed and B off the user list', async () =>
      !(await a.$(`[data-avatar-for="${sb.userClient}"]`)) && !(await a.textContent('#xr-users'))?.includes(sb.displayName), 4000).catch(async (e) => {
      throw new Error(`${e.message}: avatar ${!!(await a.$(`[data-avatar-for="${sb.userClient}"]`))}, users ${await a.textContent('#xr-users')}`);
    });
    expect(Date.now() - t0).toBeLessThan(4000);
    await close(a);
  });

  it('xrealm bots record records a browser user walking, as a pose trace for replay', async () => {
    const a = await open('/public/walk');
    const s = await session(a);
    const path = [[1, 1.6, 0], [2, 1.6, -1], [3, 1.6, -2], [4, 1.6, -3], [5, 1.6, -4], [6, 1.6, -5]];
    await placeCamera(a, 1, 1.6, 0);
    const out = join(mkdtempSync(join(tmpdir(), 'xrealm-record-')), 'walk.trace');
    const rec = spawn(xrealmBin(), ['bots', 'record', '--addr', srv.mqttURL.replace('mqtt://', ''), '--token-url', srv.url,
      '--scene', 'public/walk', '--object', s.camid, '--samples', '4', '--duration', '60s', '--out', out], { stdio: ['ignore', 'ignore', 'pipe'] });
    let log = '';
    rec.stderr!.on('data', (b) => (log += b));
    const exited = new Promise<number | null>((res) => rec.on('exit', (code) => res(code)));
    await waitFor('the recorder subscribed', () => log.includes('subscribed to'));
    // The user walks along the path, a step every 300 ms, and stays at its end.
    let i = 0;
    const walk = setInterval(() => {
      const [x, y, z] = path[Math.min(++i, path.length - 1)];
      placeCamera(a, x, y, z).catch(() => {});
    }, 300);
    try {
      expect(await exited, log).toBe(0);
    } finally {
      clearInterval(walk);
    }
    expect(log).toContain(`4 samples written to ${out}`);
    const lines = readFileSync(out, 'utf8').split('\n').filter((l) => l && !l.startsWith('#'));
    expect(lines).toHaveLength(4);
    // Every sample is a point of the path, in the order walked, and the walk
    // moved; times increase from 0.
    let last = -1, lastT = -1;
    for (const l of lines) {
      const [t, x, y, z, qx, qy, qz, qw] = l.split(' ').map(Number);
      const k = path.findIndex(([px, py, pz]) => Math.abs(px - x) < 0.01 && Math.abs(py - y) < 0.01 && Math.abs(pz - z) < 0.01);
      expect(k, `sample ${l} is not on the path`).toBeGreaterThanOrEqual(0);
      expect(k).toBeGreaterThanOrEqual(last);
      expect(t).toBeGreaterThan(lastT);
      expect(Math.abs(Math.hypot(qx, qy, qz, qw) - 1)).toBeLessThan(0.01);
      [last, lastT] = [k, t];
    }
    expect(Number(lines[0].split(' ')[0])).toBe(0);
    expect(last).toBeGreaterThan(0);
    await close(a);
  });

  it('name tags keep a readable size on screen far away, and are not huge up close', async () => {
    const a = await open('/public/nametags');
    const b = await open('/public/nametags', { width: 480, height: 360 });
    const sa = await session(a);
    const tag = `[data-avatar-for="${sa.userClient}"] [data-role="nametag"]`;
    await waitFor('B sees A', () => b.$(tag));
    await b.evaluate(() => (document.querySelector('#xr-camera') as any).setAttribute('position', '0 1.6 0'));
    // A stands d metres in front of B, who looks at it (-z); what B sees of A's tag
    const seen = async (d: number) => {
      await a.evaluate((d) => (document.querySelector('#xr-camera') as any).setAttribute('position', `0 1.6 ${-d}`), d);
      await waitFor(`A's avatar at ${d} m on B`, async () => Math.abs((await worldPos(b, `[data-avatar-for="${sa.userClient}"]`))!.z + d) < 0.01);
      // the tag scales in its tick: wait until two frames apart it holds one scale
      const scale = () => b.evaluate((sel) => (document.querySelector(sel) as any).object3D.scale.y, tag);
      await waitFor(`A's tag settled at ${d} m`, async () => {
        const before = await scale();
        await b.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r))));
        return Math.abs((await scale()) - before) < 1e-9;
      });
      return b.evaluate((sel) => {
        const sc = document.querySelector('a-scene') as any;
        const el = document.querySelector(sel) as any;
        const mesh = el.getObject3D('xr-text');
        mesh.updateMatrixWorld(true);
        const V = mesh.position.constructor;
        const [top, bottom] = [new V(0, 0.5, 0), new V(0, -0.5, 0)].map((v) => mesh.localToWorld(v));
        const head = el.parentElement.object3D.getWorldPosition(new V());
        const px = (v: any) => (v.clone().project(sc.camera).y * sc.canvas.clientHeight) / 2;
        return { pixels: px(top) - px(bottom), scale: el.object3D.scale.y, bottomAboveHead: bottom.y - head.y };
      }, tag);
    };
    const [near, mid, far, veryFar] = [await seen(1.2), await seen(3), await seen(12), await seen(30)];
    // at 12 m as large on screen as at 3 m (it was a quarter of that), and readable
    expect(far.pixels / mid.pixels).toBeGreaterThan(0.8);
    expect(far.pixels).toBeGreaterThan(10);
    // at 1.2 m at most half its own size (it was 2.5 times as large on screen as at 3 m)
    expect(near.scale).toBeCloseTo(0.5, 2);
    expect(near.pixels / mid.pixels).toBeLessThan(1.5);
    // far away it grows at most 4 times
    expect(veryFar.scale).toBeCloseTo(4, 2);
    // and it stays above the head (radius 0.18 m) at any size
    for (const t of [near, mid, far, veryFar]) expect(t.bottomAboveHead).toBeGreaterThan(0.18);
    await close(a);
    await close(b);
  });

  it('a dropped connection fires the last will, then the page reconnects and reloads the scene', async () => {
    const watcher = await mqttClient(srv, 'bot', srv.token('bot', 'public/objects', 'editor'), 'watcher-1');
    const seen: any[] = [];
    watcher.on('message', (t, p) => t.includes('/x/') && seen.push(JSON.parse(p.toString())));
    await watcher.subscribeAsync('realm/s/public/objects/x/#');
    await publish('objects', { object_id: 'before-drop', action: 'create', type: 'object', persist: true, data: { object_type: 'box', position: { x: 3, y: 1, z: -5 } } });
    const p = await open('/public/objects');
    const s = await session(p);
    await p.waitForSelector('[data-object-id="before-drop"]', { state: 'attached' });
    // Cut the WebSocket, and refuse new ones for a while.
    let blocked = true;
    await p.routeWebSocket(/\/mqtt/, (ws) => {
      if (blocked) ws.close();
      else ws.connectToServer();
    });
    await p.evaluate(() => (window as any).xrealm.bus.dropForTest());
    await waitFor('will', () => seen.find((m) => m.action === 'leave' && m.object_id === s.userClient));
    // state and text read together: while refused, the page goes on
    // between "reconnecting in Ns" and "Connecting…"
    await waitFor('reconnecting status', async () => {
      const st = await p.$eval('#xr-status', (el) => ({ state: el.getAttribute('data-state'), text: el.textContent ?? '' }));
      return st.state === 'reconnecting' && /reconnecting in \d+s/.test(st.text);
    });
    // Meanwhile the scene changes.
    await publish('objects', { object_id: 'during-drop', action: 'create', type: 'object', persist: true, data: { object_type: 'sphere', position: { x: -3, y: 1, z: -5 } } });
    await publish('objects', { object_id: 'before-drop', action: 'delete', persist: true });
    await waitFor('stored', async () => (await persisted('public', 'objects')).some((o) => o.object_id === 'during-drop'));
    blocked = false;
    await waitFor('reconnected', async () => (await p.getAttribute('#xr-status', 'data-state')) === 'connected', 40_000);
    await p.waitForSelector('[data-object-id="during-drop"]', { state: 'attached' });
    await waitFor('deleted object gone', async () => !(await p.$('[data-object-id="before-drop"]')));
    await publish('objects', { object_id: 'during-drop', action: 'delete', persist: true });
    watcher.end(true);
    await close(p);
  }, 90_000);
});

describe('reconnection during a load', () => {
  it('a load that ends after the next reconnection started does not end that one\'s hold on live messages', { timeout: 90_000 }, async () => {
    // Connection A2's load is slow; A2 is lost and A3 connects before it
    // ends. A2's load ended by applying what was held and taking messages
    // live again, while A3's load was yet to come: a message that came
    // then was drawn, and A3's snapshot, read before it, removed it.
    const held: import('playwright-core').Route[] = [];
    const p = await newPage();
    let hold = false;
    await p.route('**/persist/public/reloadrace', (r) => (hold ? held.push(r) : r.continue()));
    await p.goto(`${srv.url}/public/reloadrace?quality=low`);
    await p.waitForSelector('a-scene[data-loaded="true"]', { state: 'attached', timeout: 30_000 });
    const connected = () => waitFor('connected', async () => (await p.getAttribute('#xr-status', 'data-state')) === 'connected', 30_000);
    hold = true;
    await p.evaluate(() => (window as any).xrealm.bus.dropForTest());
    await waitFor('A2 loading', () => held.length === 1, 30_000);
    await p.evaluate(() => (window as any).xrealm.bus.dropForTest());
    await connected();
    await waitFor('A3 loading', () => held.length === 2, 30_000);
    // A2's load ends now; A3's snapshot is read now, before the message
    await held[0].continue();
    const snapshot = await held[1].fetch();
    const ed = await mqttClient(srv, 'bot', srv.token('bot', 'public/reloadrace', 'editor'), 'reloadrace-bot');
    try {
      const before = await p.evaluate(() => (window as any).xrealm.bus.received as number);
      await ed.publishAsync('realm/s/public/reloadrace/o/reloadrace-bot/late', JSON.stringify({
        object_id: 'late', action: 'create', type: 'object', persist: true, data: { object_type: 'box' },
      }), { qos: 1 });
      await waitFor('the message received', async () => (await p.evaluate(() => (window as any).xrealm.bus.received as number)) > before);
      await held[1].fulfill({ response: snapshot });
      await waitFor('A3 loaded', () => p.evaluate(() => !!(window as any).xrealm.model && document.querySelector('a-scene')!.getAttribute('data-loaded') === 'true'));
      await waitFor('the object drawn after the load', () => p.evaluate(() => (window as any).xrealm.model.objects.has('late') && !!document.querySelector('[data-object-id="late"]')), 5_000);
    } finally {
      ed.end(true);
    }
  });

  it('a load that ends after the next connection\'s load leaves that one\'s objects alone, and its failure says nothing', { timeout: 90_000 }, async () => {
    // Connection A2's load is slow; A3 connects and loads first. A2's load
    // then applied its snapshot, older than A3's, removing what was made
    // since; a failed one showed 'Could not load' over the loaded scene.
    for (const fails of [false, true]) {
      const held: import('playwright-core').Route[] = [];
      const p = await newPage();
      if (fails) expectConsole(p, /Failed to load resource: the server responded with a status of 500/);
      let hold = false;
      await p.route('**/persist/public/reloadorder', (r) => (hold ? held.push(r) : r.continue()));
      await p.goto(`${srv.url}/public/reloadorder?quality=low`);
      await p.waitForSelector('a-scene[data-loaded="true"]', { state: 'attached', timeout: 30_000 });
      hold = true;
      await p.evaluate(() => (window as any).xrealm.bus.dropForTest());
      await waitFor('A2 loading', () => held.length === 1, 30_000);
      const stale = await held[0].fetch(); // read before the object is made
      await p.evaluate(() => (window as any).xrealm.bus.dropForTest());
      await waitFor('A3 loading', () => held.length === 2, 30_000);
      const id = `made${fails ? 2 : 1}`;
      const ed = await mqttClient(srv, 'bot', srv.token('bot', 'public/reloadorder', 'editor'), `reloadorder-bot${fails ? 2 : 1}`);
      try {
        const before = await p.evaluate(() => (window as any).xrealm.bus.received as number);
        await ed.publishAsync(`realm/s/public/reloadorder/o/reloadorder-bot/${id}`, JSON.stringify({
          object_id: id, action: 'create', type: 'object', persist: true, data: { object_type: 'box' },
        }), { qos: 1 });
        await waitFor('the message received', async () => (await p.evaluate(() => (window as any).xrealm.bus.received as number)) > before);
      } finally {
        ed.end(true);
      }
      // A3's load ends (the object is in its snapshot or held), then A2's
      await held[1].continue();
      await waitFor('the object drawn after A3\'s load', () => p.evaluate((id) => (window as any).xrealm.model.objects.has(id) && !!document.querySelector(`[data-object-id="${id}"]`), id), 15_000);
      const done = p.waitForEvent('requestfinished', (r) => r.url().endsWith('/persist/public/reloadorder'));
      if (fails) await held[0].fulfill({ status: 500, contentType: 'application/json', body: '{"error":"stale failure"}' });
      else await held[0].fulfill({ response: stale });
      await done;
      // the page has the answer: whatever A2 does with it, it does within a few tasks
      for (let i = 0; i < 5; i++) await p.evaluate(() => new Promise((r) => setTimeout(r, 0)));
      expect(await p.evaluate((id) => (window as any).xrealm.model.objects.has(id), id), 'the object kept').toBe(true);
      expect(await p.$eval('#xr-error', (e) => (e as HTMLElement).hidden).catch(() => true), 'no error banner').toBe(true);
    }
  });
});

describe('an object nested too deep', () => {
  it('an object whose data the page cannot copy (nested 9,000 deep) is left out, stored or held back during a load; the rest loads and live messages go on', { timeout: 90_000 }, async () => {
    // The server stores JSON nested up to 10,000 deep; the page's merge
    // (and structuredClone) run out of stack before that. Stored, such
    // an object failed the whole load ('Could not load the scene's
    // objects', for everyone); held back during a load, it ended the
    // load before the hold did, and every later message was held for good.
    let deep = '{"x":1}';
    for (let i = 0; i < 9000; i++) deep = `{"a":${deep}}`;
    const ed = await mqttClient(srv, 'bot', srv.token('bot', 'public/deep', 'editor'), 'deep-bot');
    const pub = (m: Record<string, unknown>) => ed.publishAsync(`realm/s/public/deep/o/deep-bot/${m.object_id}`, JSON.stringify(m), { qos: 1 });
    const deepMsg = (id: string) => `{"object_id":"${id}","action":"create","type":"object","persist":true,"data":{"object_type":"entity","nested":${deep}}}`;
    try {
      await pub({ object_id: 'fine', action: 'create', type: 'object', persist: true, data: { object_type: 'box' } });
      await ed.publishAsync('realm/s/public/deep/o/deep-bot/deep1', deepMsg('deep1'), { qos: 1 });
      await waitFor('stored', async () => (await persisted('public', 'deep')).some((o) => o.object_id === 'deep1'));
      // stored: the page loads the others
      const a = await open('/public/deep');
      expectConsole(a, /object deep1 .*could not be taken/, /a message on .*deep2 could not be applied/);
      await a.waitForSelector('[data-object-id="fine"]', { state: 'attached' });
      expect(await a.$eval('#xr-error', (e) => (e as HTMLElement).hidden).catch(() => true)).toBe(true);
      // held back during a load: the load ends, and live messages go on
      let hold = true;
      const held: import('playwright-core').Route[] = [];
      const b = await newPage();
      expectConsole(b, /object deep[12] .*could not be taken/, /a message on deep2 could not be applied/);
      await b.route('**/persist/public/deep', (r) => (hold ? held.push(r) : r.continue()));
      await b.goto(`${srv.url}/public/deep?quality=low`);
      await waitFor('the load asked for', () => held.length === 1, 30_000);
      const before = await b.evaluate(() => (window as any).xrealm.bus.received as number);
      await ed.publishAsync('realm/s/public/deep/o/deep-bot/deep2', deepMsg('deep2'), { qos: 1 });
      await waitFor('the message received', async () => (await b.evaluate(() => (window as any).xrealm.bus.received as number)) > before);
      hold = false;
      await held[0].continue();
      await b.waitForSelector('a-scene[data-loaded="true"]', { state: 'attached', timeout: 30_000 });
      await pub({ object_id: 'after', action: 'create', type: 'object', persist: true, data: { object_type: 'sphere' } });
      await b.waitForSelector('[data-object-id="after"]', { state: 'attached' });
      // (the held-back one was applied, and dropped, after the load)
      expect(warnings.get(b)!.some((w) => /a message on deep2 could not be applied/.test(w))).toBe(true);
    } finally {
      ed.end(true);
    }
  });

  it('an object on the page whose stored version now nests too deep leaves the page at the next load', { timeout: 90_000 }, async () => {
    // It was kept as it was, while the other pages leave it out.
    let deep = '{"x":1}';
    for (let i = 0; i < 9000; i++) deep = `{"a":${deep}}`;
    const ed = await mqttClient(srv, 'bot', srv.token('bot', 'public/deeper', 'editor'), 'deeper-bot');
    try {
      const a = await open('/public/deeper');
      expectConsole(a, /a message on .*grows could not be applied/, /object grows .*could not be taken/);
      await ed.publishAsync('realm/s/public/deeper/o/deeper-bot/grows', JSON.stringify({
        object_id: 'grows', action: 'create', type: 'object', persist: true, data: { object_type: 'box' },
      }), { qos: 1 });
      await a.waitForSelector('[data-object-id="grows"]', { state: 'attached' });
      // live, the deep version cannot be applied (dropped); stored, it is the object
      await ed.publishAsync('realm/s/public/deeper/o/deeper-bot/grows',
        `{"object_id":"grows","action":"create","type":"object","persist":true,"data":{"object_type":"entity","nested":${deep}}}`, { qos: 1 });
      await waitFor('stored', async () => (await (await fetch(`${srv.url}/persist/public/deeper`)).text()).includes('"nested"'));
      await waitFor('dropped', async () => (warnings.get(a) ?? []).some((w) => /a message on .*grows could not be applied/.test(w)));
      await a.evaluate(() => (window as any).xrealm.bus.dropForTest());
      await waitFor('left out at the load', () => a.evaluate(() => !(window as any).xrealm.model.objects.has('grows') && !document.querySelector('[data-object-id="grows"]')), 20_000);
    } finally {
      ed.end(true);
    }
  });
});

describe('presence ttl', () => {
  it('a pose with a huge ttl keeps its sender listed for at most 30 s after it (MAX_POSE_TTL_S)', async () => {
    const page = await open('/public/ttl');
    await waitFor('connected', async () => (await page.getAttribute('#xr-status', 'data-state')) === 'connected');
    const id = 'eveTTL';
    const eve = await mqttClient(srv, id, srv.token(id, 'public/ttl', 'viewer'), id);
    try {
      for (const ttl of [1e12, 45]) {
        eve.publish(`realm/s/public/ttl/u/${id}/camera_${id}`, JSON.stringify({
          object_id: `camera_${id}`, action: 'update', type: 'object', ttl,
          data: { object_type: 'camera', position: { x: 1, y: 1.6, z: -2 }, rotation: { x: 0, y: 0, z: 0, w: 1 }, displayName: `eve ${ttl}` },
        }));
        const left = await waitFor(`eve listed with ttl ${ttl}`, () => page.evaluate(([id, name]) => {
          const u = (window as any).xrealm.presence.users.get(id);
          return u?.displayName === name ? u.expires - Date.now() : undefined;
        }, [id, `eve ${ttl}`] as const));
        expect(left, `ttl ${ttl}`).toBeGreaterThan(0);
        expect(left, `ttl ${ttl}`).toBeLessThanOrEqual(30_000);
      }
    } finally {
      eve.end(true);
    }
  });
});

describe('console', () => {
  it('pages nobody has touched yet say nothing on the console, also once they receive audio slots', async () => {
    // Nothing here waits in the page (waitForSelector, evaluate) before
    // the check: Playwright's calls into the page count as a user gesture,
    // and the page warned only without one (it resumed its AudioContext
    // before a gesture, once per audio slot). The page itself says when
    // its SFU connection is up, on the console.
    const list = await open('/');
    await list.waitForSelector('#scene-list [data-scene], #scene-list li:has-text("No scenes")');
    for (const path of ['/public/quiet', '/public/quiet/edit']) {
      const p = await newPage();
      await p.addInitScript(() => {
        new MutationObserver(() => {
          if (document.querySelector('#xr-media')?.getAttribute('data-state') === 'connected') console.log('test: media connected');
        }).observe(document, { subtree: true, attributes: true, attributeFilter: ['data-state'] });
      });
      const connected = p.waitForEvent('console', { predicate: (m) => m.text() === 'test: media connected', timeout: 30_000 });
      await p.goto(`${srv.url}${path}?quality=low`);
      await connected; // the audio slots' tracks arrived before
      expect(await p.evaluate(() => navigator.userActivation.hasBeenActive)).toBe(true); // (the evaluate's own)
      expect(warnings.get(p)!.filter((w) => !ALWAYS.some((r) => r.test(w))), path).toEqual([]);
      const stats = await p.evaluate(() => (window as any).xrealm.media.stats());
      expect(stats.remote.filter((r: any) => r.kind === 'audio')).toHaveLength(8);
      expect(stats.audioContext).toBe('suspended');
      // A click on the page is the gesture that lets audio start.
      await p.mouse.click(200, 200);
      await waitFor('audio running', async () => (await p.evaluate(() => (window as any).xrealm.media.stats().audioContext)) === 'running');
    }
  });

  it('a page left while its SFU connection opens says nothing on the console', async () => {
    // The page is left (the SFU session stops) in the same task as its SFU
    // WebSocket is made, so that the socket is still opening; once it has
    // closed, the page's console is checked.
    const p = await newPage();
    await p.addInitScript(() => {
      const Native = window.WebSocket;
      (window as any).WebSocket = class extends Native {
        constructor(url: string | URL, protocols?: string | string[]) {
          super(url, protocols);
          if (!String(url).includes('/sfu/ws')) return;
          this.addEventListener('close', () => console.log('test: sfu socket closed'));
          queueMicrotask(() => (window as any).xrealm.sfu.stop());
        }
      };
    });
    const closed = p.waitForEvent('console', { predicate: (m) => m.text() === 'test: sfu socket closed', timeout: 30_000 });
    await p.goto(`${srv.url}/public/quiet?quality=low`);
    await closed;
    await p.evaluate(() => new Promise((r) => setTimeout(r, 100)));
    expect(warnings.get(p)!.filter((w) => !ALWAYS.some((r) => r.test(w)))).toEqual([]);
  });
});

describe('point-cloud warnings', () => {
  it('the warnings counted since the last count are logged when the view stops', async () => {
    const a = await open('/public/pcwarnings?media=0&pcpublish=0');
    expectConsole(a, /xrealm: point clouds: point-cloud message of \d+ bytes is shorter/, /more point-cloud warnings suppressed/);
    /** Sends the view's decoder worker messages of from..to bytes, too short to read: each comes back as a warning. */
    const junk = (from: number, to: number) => a.evaluate(async ([from, to]) => {
      const v = (window as any).xrealm.pointclouds;
      await v.ready();
      for (let n = from; n <= to; n++) {
        const b = new ArrayBuffer(n);
        v.toWorker({ type: 'frag', publisher: 'junk', buf: b }, [b]);
      }
    }, [from, to]);
    const bad = (n: number) => waitFor(`${n} bad messages`, () => a.evaluate((n) => (window as any).xrealm.pointclouds.stats().badMessages === n, n));
    /** The counts of the summary lines so far, with the last message each names. */
    const counts = () => warnings.get(a)!.map((w) => w.match(/(\d+) more point-cloud warnings suppressed; the last: .* of (\d+) bytes/)).filter((m) => m).map((m) => `${m![1]} to ${m![2]}`);
    await junk(1, 10);
    await bad(10);
    // five in full; the next second's count says five more
    await waitFor('the first count', () => counts().length === 1);
    expect(counts()).toEqual(['5 to 10']);
    // ten more, within the interval of the counts: counted, and said when the view stops
    await junk(11, 20);
    await bad(20);
    await a.evaluate(() => (window as any).xrealm.pointclouds.stop());
    await waitFor('the count at the stop', () => counts().length === 2, 5_000).catch(() => {});
    expect(counts()).toEqual(['5 to 10', '10 to 20']);
  });
});

describe('SFU signalling', () => {
  it('an SFU socket that closes before the offer is sent fails the join at once, and the page joins again, with nothing on the console', async () => {
    const p = await newPage();
    // The page's first SFU socket closes while its first PeerConnection
    // gathers candidates, that is before the offer is sent on it.
    await p.addInitScript(() => {
      const NativeWS = window.WebSocket;
      let sfu: WebSocket | null = null;
      (window as any).WebSocket = class extends NativeWS {
        constructor(url: string | URL, protocols?: string | string[]) {
          super(url, protocols);
          if (String(url).includes('/sfu/ws')) sfu = this;
        }
      };
      const NativePC = window.RTCPeerConnection;
      let first = true;
      (window as any).RTCPeerConnection = class extends NativePC {
        constructor(c?: RTCConfiguration) {
          super(c);
          if (!first) return;
          first = false;
          this.addEventListener('icegatheringstatechange', () => {
            if (this.iceGatheringState !== 'gathering') return;
            sfu!.close();
            console.log('test: sfu socket closed while gathering');
            // the first connection's request (the offer) says when it is answered
            const conn = (window as any).xrealm.sfu.connection;
            const request = conn.request.bind(conn);
            conn.request = (s: any) => {
              const r = request(s);
              r.then((rep: any) => console.log(`test: first ${s.op} answered: ${JSON.stringify(rep)}`));
              return r;
            };
          });
        }
      };
    });
    const closed = p.waitForEvent('console', { predicate: (m) => m.text() === 'test: sfu socket closed while gathering', timeout: 30_000 });
    const answered = p.waitForEvent('console', { predicate: (m) => m.text().startsWith('test: first offer answered'), timeout: 15_000 });
    await p.goto(`${srv.url}/public/sfuclosed?quality=low`);
    await closed;
    expect((await answered).text()).toBe('test: first offer answered: {"op":"error","error":"SFU WebSocket closed"}');
    await waitFor('the SFU joined again', async () => (await p.evaluate(() => (window as any).xrealm.sfu.state)) === 'connected', 30_000)
      .catch(async (e) => { throw new Error(`${e.message}: state ${await p.evaluate(() => (window as any).xrealm.sfu.state)}`); });
  });
});

describe('render on demand', () => {
  it('an idle page skips its frames, and draws what changes: a new object, a colour, an animation, the camera', async () => {
    // ?render=changes: no frame is drawn but for a change, so that what the
    // page does not see as one stays undrawn
    const p = await open('/public/ondemand?render=changes', { width: 640, height: 400 });
    await waitFor('connected', async () => (await p.getAttribute('#xr-status', 'data-state')) === 'connected');
    await placeCamera(p, 0, 1.6, 0);
    const ed = await mqttClient(srv, 'bot', srv.token('bot', 'public/ondemand', 'editor'), 'pyClient-000003');
    const pub = (m: Record<string, unknown>) => ed.publishAsync(`realm/s/public/ondemand/o/pyClient-000003/${m.object_id}`, JSON.stringify(m), { qos: 1 });
    try {
      const frames = () => p.evaluate(() => ({ ...(window as any).xrealm.frames }) as { drawn: number; skipped: number });
      /** Frames drawn and skipped over ten more frames of the render loop. */
      const tenFrames = async () => {
        const f0 = await frames();
        await waitFor('ten frames', async () => { const f = await frames(); return f.drawn + f.skipped >= f0.drawn + f0.skipped + 10; });
        const f1 = await frames();
        return { drawn: f1.drawn - f0.drawn, skipped: f1.skipped - f0.skipped };
      };
      await waitFor('an idle page draws no frame', async () => (await tenFrames()).drawn === 0);
      // Another user stands in view, idle: once its avatar has glided there,
      // its frames are not drawn either (three bumps the version of its name
      // tag's material in every draw, and the smoothing moved it by a
      // rounding error in every frame)
      const q = await open('/public/ondemand');
      await placeCamera(q, 1, 1.6, -3);
      const sq = await session(q);
      await waitFor('the other user in view', () => p.$(`[data-avatar-for="${sq.userClient}"]`));
      await waitFor('its avatar at its place', async () => Math.abs(((await worldPos(p, `[data-avatar-for="${sq.userClient}"]`))?.z ?? 0) + 3) < 1e-3);
      const tag = await screenPoint(p, `[data-avatar-for="${sq.userClient}"] [data-role="nametag"]`);
      expect(tag.x > 0 && tag.x < 640 && tag.y > 0 && tag.y < 400, `name tag on screen at ${JSON.stringify(tag)}`).toBe(true);
      await waitFor('an idle page with an avatar in view draws no frame', async () => (await tenFrames()).drawn === 0, 10_000);
      await pub({
        object_id: 'redbox', action: 'create', type: 'object', persist: true,
        data: { object_type: 'box', position: { x: 0, y: 1.6, z: -2.5 }, material: { color: '#ff0000', shader: 'flat' } },
      });
      await waitForColour(p, 'red', 'the new box drawn red');
      await pub({ object_id: 'redbox', action: 'update', type: 'object', persist: true, data: { material: { color: '#0000ff' } } });
      await waitForColour(p, 'blue', 'the box drawn blue');
      await waitFor('idle again', async () => (await tenFrames()).drawn === 0);
      // A turning box is drawn in every frame.
      await pub({ object_id: 'redbox', action: 'update', type: 'object', persist: true, data: { animation: { property: 'rotation', to: '0 360 0', loop: true, dur: 4000, easing: 'linear' } } });
      await waitFor('every frame drawn while the box turns', async () => (await tenFrames()).skipped === 0);
      const at = await screenPoint(p, '[data-object-id="redbox"]');
      await pub({ object_id: 'redbox', action: 'delete' });
      await p.waitForSelector('[data-object-id="redbox"]', { state: 'detached' });
      await waitFor('the deleted box undrawn', async () => (await pixelShare(p, await p.screenshot(), 'blue', at)) < 0.1);
      await waitFor('idle without the box', async () => (await tenFrames()).drawn === 0);
      // The camera moves: its frame is drawn.
      const before = (await frames()).drawn;
      await placeCamera(p, 0.5, 1.6, 0);
      await waitFor('the moved camera drawn', async () => (await frames()).drawn > before);
    } finally {
      ed.end(true);
    }
  });
});

describe('keyboard and mouse', () => {
  it('WASD walks and a drag looks around without WebXR, also after a click on a button; typing in chat does not walk, and Escape leaves it', async () => {
    const p = await open('/public/keys', { width: 900, height: 500 });
    const cam = () => p.evaluate(() => {
      const o = (document.querySelector('#xr-camera') as any).object3D;
      return { x: o.position.x, z: o.position.z, yaw: o.rotation.y };
    });
    /** Resolves after the page has drawn n frames (a loaded machine draws few). */
    const frames = (n: number) => p.evaluate((n) => new Promise<void>((r) => {
      const f = () => (--n <= 0 ? r() : requestAnimationFrame(f));
      requestAnimationFrame(f);
    }), n);
    /**
     * How far W walks, once the camera has stopped gliding. Held until the
     * camera has walked 0.3 m (at most 10 s) when it should walk, else for
     * 400 ms and ten frames: the distance of a fixed hold depends on the
     * frames drawn meanwhile, and A-Frame's wasd-controls does not move in a
     * frame longer than 200 ms (a loaded run walked 0.25 m in 400 ms).
     */
    const walk = async (what: string, walks = true) => {
      const a = await cam();
      await p.keyboard.down('w');
      if (walks) {
        // the distance is checked by the caller
        await waitFor(`W walks (${what})`, async () => {
          const x = await cam();
          return Math.hypot(x.x - a.x, x.z - a.z) > 0.3;
        }, 10_000).catch(() => {});
      } else {
        await p.waitForTimeout(400);
        await frames(10);
      }
      await p.keyboard.up('w');
      // still for a few frames, not just for a while in which none was drawn
      await waitFor(`camera stops (${what})`, async () => {
        const x = await cam();
        await p.waitForTimeout(150);
        await frames(3);
        const y = await cam();
        return Math.hypot(y.x - x.x, y.z - x.z) < 1e-3;
      });
      const b = await cam();
      return Math.hypot(b.x - a.x, b.z - a.z);
    };
    expect(await walk('fresh page')).toBeGreaterThan(0.3);
    // Drag to look.
    const yaw = (await cam()).yaw;
    await p.mouse.move(300, 300);
    await p.mouse.down();
    await p.mouse.move(400, 300, { steps: 5 });
    await p.mouse.up();
    // look-controls turns its yaw object on the mouse events and the camera
    // in its next tick: a loaded machine may not have drawn a frame yet
    await waitFor('the camera turned by the drag', async () => Math.abs((await cam()).yaw - yaw) > 0.1, 5_000).catch(async (e) => {
      throw new Error(`${e.message}: yaw ${(await cam()).yaw}, ${yaw} before the drag`);
    });
    // A mouse click on a button leaves the keys to walking (it kept the
    // focus, and A-Frame walks only while nothing has it).
    for (const button of ['#xr-side-toggle', '#xr-side-toggle', '#xr-mic', '#xr-mic']) {
      await p.click(button);
      expect(await walk(`after a click on ${button}`), button).toBeGreaterThan(0.3);
    }
    // Keys typed in chat stay there; Escape gives them back to walking.
    await p.click('#xr-chat-input');
    expect(await walk('typing in chat', false)).toBeLessThan(1e-3);
    expect(await p.inputValue('#xr-chat-input')).toBe('w');
    await p.keyboard.press('Escape');
    expect(await p.evaluate(() => document.activeElement === document.body)).toBe(true);
    expect(await p.inputValue('#xr-chat-input')).toBe('w'); // nothing typed is lost
    expect(await walk('after Escape')).toBeGreaterThan(0.3);
    // A keyboard user keeps the focus on the button pressed with Enter.
    await p.focus('#xr-side-toggle');
    await p.keyboard.press('Enter');
    expect(await p.evaluate(() => document.activeElement?.id)).toBe('xr-side-toggle');
    expect(await p.getAttribute('#xr-side-toggle', 'aria-pressed')).toBe('false');
  });
});

describe('server restart', () => {
  it('the pages say the server is gone, keep what the user typed, send nothing stale, and carry on when it is back', { timeout: 180_000 }, async () => {
    const alice = srv.token('alice', 'alice/restart', 'editor');
    const ed = await open(`/alice/restart/edit?token=${alice}`, { width: 1000, height: 700 });
    const view = await open('/alice/restart');
    // (and the 503 of a token asked for while the server stops or starts,
    // which the page retries; but not Chromium's 'WebSocket is already in
    // CLOSING or CLOSED state': nothing is sent on a socket that is closing)
    const gone = /ERR_CONNECTION_REFUSED|WebSocket connection to .* failed|xrealm: MQTT error|status of 503 \(Service Unavailable\) \(.*\/user\/v2\/mqtt_auth\)/;
    for (const p of [ed, view]) expectConsole(p, gone);
    await ed.selectOption('#new-type', 'box');
    await ed.fill('#new-id', 'crate');
    await ed.click('#new-create');
    await view.waitForSelector('[data-object-id="crate"]', { state: 'attached' });
    await ed.waitForSelector('#f-form');
    await ed.fill('#xr-chat-input', 'typed before the restart');
    const sv = await session(view);
    await waitFor('editor sees the viewer', () => ed.$(`[data-avatar-for="${sv.userClient}"]`));

    await srv.down();
    for (const p of [ed, view]) {
      await waitFor('the page says the server cannot be reached', async () =>
        /^Disconnected \(the server cannot be reached\); reconnecting in \d+s/.test((await p.textContent('#xr-status')) ?? ''), 30_000);
    }
    expect(await ed.isDisabled('#xr-chat-input')).toBe(true);
    expect(await ed.inputValue('#xr-chat-input')).toBe('typed before the restart');
    // An edit while the server is away fails, and says so.
    await ed.fill('#f-position-x', '-2');
    await ed.click('#f-apply');
    await waitFor('the failed edit is shown', async () => (await ed.textContent('#xr-toasts'))?.includes('Update failed: not connected'));

    // A toast goes after 3.5 s, and each page reconnects after its own
    // backoff (jittered, seconds by now): the editor's toast may be gone by
    // the time the viewer is back. Every toast it shows is kept.
    await ed.evaluate(() => {
      const seen: string[] = ((window as any).toastsSeen = []);
      new MutationObserver((ms) => ms.forEach((m) => m.addedNodes.forEach((n) => {
        if ((n as Element).classList?.contains('toast')) seen.push(n.textContent ?? '');
      }))).observe(document.body, { childList: true, subtree: true });
    });
    await srv.up();
    for (const p of [ed, view]) await waitFor('reconnected', async () => (await p.getAttribute('#xr-status', 'data-state')) === 'connected', 60_000);
    const toasts = () => ed.evaluate(() => (window as any).toastsSeen as string[]);
    await waitFor('reconnected toast', async () => (await toasts()).some((t) => t.includes('Reconnected'))).catch(async (e) => {
      throw new Error(`${e.message}; the editor's toasts since the server came back: ${JSON.stringify(await toasts())}`);
    });
    expect(await ed.isDisabled('#xr-chat-input')).toBe(false);
    expect(await ed.inputValue('#xr-chat-input')).toBe('typed before the restart');
    // The refused edit is not sent later; the object is where it was.
    const stored = (await persisted('alice', 'restart')).find((o) => o.object_id === 'crate');
    expect(stored.attributes.position.x).not.toBe(-2);
    await view.waitForSelector('[data-object-id="crate"]', { state: 'attached' });
    // Chat, avatars and edits work again.
    await ed.press('#xr-chat-input', 'Enter');
    await waitFor('chat after the restart', async () => (await view.textContent('#xr-chat-log'))?.includes('typed before the restart'));
    await waitFor('avatar after the restart', () => ed.$(`[data-avatar-for="${sv.userClient}"]`));
    await ed.fill('#f-position-x', '-2');
    await ed.click('#f-apply');
    await waitFor('moved in the viewer', async () => Math.abs(((await worldPos(view, '[data-object-id="crate"]'))?.x ?? 0) + 2) < 1e-6);
  });
});

describe('closing connection', () => {
  it('a connection whose WebSocket is closing is not shown connected, and chat sent into it fails and keeps the text', async () => {
    const p = await open('/public/closing');
    await waitFor('connected', async () => (await p.getAttribute('#xr-status', 'data-state')) === 'connected');
    await p.fill('#xr-chat-input', 'typed as the server closed');
    // The socket starts closing, as on a server's close frame (mqtt.js
    // still says connected until its close event), and the user presses
    // Enter at once.
    const at = await p.evaluate(() => {
      const x = (window as any).xrealm;
      x.bus.closeSocketForTest();
      (document.querySelector('#xr-chat-form') as HTMLFormElement).requestSubmit();
      return {
        connected: x.bus.connected, state: document.querySelector('#xr-status')!.getAttribute('data-state'),
        disabled: (document.querySelector('#xr-chat-input') as HTMLInputElement).disabled,
      };
    });
    expect(at).toEqual({ connected: false, state: 'reconnecting', disabled: true });
    await waitFor('chat not sent', async () => (await p.textContent('#xr-toasts'))?.includes('Chat not sent: not connected'));
    expect(await p.inputValue('#xr-chat-input')).toBe('typed as the server closed');
    await waitFor('reconnected', async () => (await p.getAttribute('#xr-status', 'data-state')) === 'connected', 40_000);
    await p.press('#xr-chat-input', 'Enter');
    await waitFor('chat after the reconnection', async () => (await p.textContent('#xr-chat-log'))?.includes('typed as the server closed'));
    expect(await p.textContent('#xr-chat-log')).not.toMatch(/typed as the server closed[^]*typed as the server closed/);
  });
});

describe('closing connection, in flight', () => {
  it('what mqtt.js writes after the socket started closing is not sent into it (no Chromium error)', async () => {
    const p = await open('/public/closing');
    await waitFor('connected', async () => (await p.getAttribute('#xr-status', 'data-state')) === 'connected');
    await p.fill('#xr-chat-input', 'sent as the server closed');
    // The chat is handed to mqtt.js while the socket is open, which writes
    // it a tick later, when the socket has started closing (as when the
    // server's close frame arrives in between).
    await p.evaluate(() => {
      (document.querySelector('#xr-chat-form') as HTMLFormElement).requestSubmit();
      (window as any).xrealm.bus.closeSocketForTest();
    });
    await waitFor('reconnected', async () => (await p.getAttribute('#xr-status', 'data-state')) === 'connected', 40_000);
  });
});

describe('token renewal', () => {
  it('a page renews its token before it expires, without losing the connection or leaving the scene for others', { timeout: 120_000 }, async () => {
    // a server whose scene tokens last 10 s: the page renews each 2 s before
    const short = await startServer({ args: ['--token-ttl', '10s'] });
    try {
      const watcher = await mqttClient(short, 'bot', short.token('bot', 'public/renewal', 'editor'), 'renewal-watcher');
      const presence: any[] = [];
      watcher.on('message', (_t, p) => presence.push(JSON.parse(p.toString())));
      await watcher.subscribeAsync('realm/s/public/renewal/x/#');
      const p = await newPage();
      await p.goto(`${short.url}/public/renewal?quality=low`);
      await p.waitForSelector('a-scene[data-loaded="true"]', { state: 'attached', timeout: 30_000 });
      await p.evaluate(() => {
        const st = document.querySelector('#xr-status')!;
        const w = window as any;
        w.states = [st.getAttribute('data-state')];
        w.toastsSeen = [];
        new MutationObserver(() => w.states.push(st.getAttribute('data-state'))).observe(st, { attributes: true, attributeFilter: ['data-state'] });
        new MutationObserver((ms) => ms.forEach((m) => m.addedNodes.forEach((n) => {
          if ((n as Element).classList?.contains('toast')) w.toastsSeen.push(n.textContent ?? '');
        }))).observe(document.body, { childList: true, subtree: true });
      });
      const me = (await p.evaluate(() => (window as any).xrealm.session())).userClient as string;
      const tokens = new Set<string>();
      // two renewals: the page has had three tokens, past the first two's expiry
      await waitFor('two renewals', async () => {
        tokens.add(await p.evaluate(() => (window as any).xrealm.session().token));
        return tokens.size >= 3 && (await p.getAttribute('#xr-status', 'data-state')) === 'connected';
      }, 40_000);
      const states: string[] = await p.evaluate(() => (window as any).states);
      expect(states.filter((s) => s !== 'connecting' && s !== 'connected'), states.join(' ')).toEqual([]);
      expect(presence.filter((m) => m.object_id === me && m.action === 'leave')).toEqual([]);
      expect(short.log()).not.toMatch(new RegExp(`MQTT connection closed.*client=${me}.*reason="token expired"`));
      expect(await p.evaluate(() => (window as any).toastsSeen)).toEqual([]);
      // and the connection works: chat goes through
      await p.fill('#xr-chat-input', 'after the renewals');
      await p.press('#xr-chat-input', 'Enter');
      await waitFor('chat after the renewals', async () => (await p.textContent('#xr-chat-log'))?.includes('after the renewals'));
      watcher.end(true);
    } finally {
      await short.stop();
    }
  });

  it('a renewal with a publish still unacknowledged connects again', { timeout: 120_000 }, async () => {
    // mqtt.js's end(false) waits for the acknowledgements of QoS 1
    // publishes in flight, and never calls back if the socket closes
    // first (the server closes a connection whose publish it could not
    // store): the page stayed disconnected for good, still saying
    // Connected.
    const short = await startServer({ args: ['--token-ttl', '10s'] });
    try {
      const p = await newPage();
      await p.goto(`${short.url}/public/renewal-inflight?quality=low`);
      await p.waitForSelector('a-scene[data-loaded="true"]', { state: 'attached', timeout: 30_000 });
      const first = await p.evaluate(() => (window as any).xrealm.session().token);
      // a publish the server will never acknowledge, as mqtt.js keeps one
      await p.evaluate(() => {
        const c = (window as any).xrealm.bus.client;
        c.outgoing[65000] = { volatile: false, cb: () => {} };
      });
      await waitFor('a renewed connection', async () => {
        const t = await p.evaluate(() => (window as any).xrealm.session()?.token);
        return t && t !== first && (await p.getAttribute('#xr-status', 'data-state')) === 'connected';
      }, 40_000);
      await p.fill('#xr-chat-input', 'after the stuck renewal');
      await p.press('#xr-chat-input', 'Enter');
      await waitFor('chat after the renewal', async () => (await p.textContent('#xr-chat-log'))?.includes('after the stuck renewal'));
    } finally {
      await short.stop();
    }
  });
});

describe('token renewal at the end of a sign-in', () => {
  it('a renewal whose token expires no later than the one it replaces does not reconnect', { timeout: 90_000 }, async () => {
    // The server caps a scene token's expiry at the sign-in token's: near
    // its end every renewal gets the same exp, and each reconnected (the
    // scene loaded again, messages lost) for nothing, a fifth of the
    // remaining lifetime before the end, again and again.
    const signin = execFileSync(xrealmBin(), ['token', '--user', 'ivan', '--scene', 'ivan/lab', '--role', 'editor', '--data', srv.dataDir, '--ttl', '15s']).toString().trim();
    const exp = JSON.parse(Buffer.from(signin.split('.')[1], 'base64url').toString()).exp * 1000;
    const p = await newPage();
    // at its end: the connection closes, and the expired sign-in token is refused
    expectConsole(p, /status of 401/, /MQTT error/);
    const asked: number[] = [];
    p.on('request', (r) => { if (r.url().endsWith('/user/v2/mqtt_auth')) asked.push(Date.now()); });
    await p.goto(`${srv.url}/public/signinend?quality=low&token=${signin}`);
    await p.waitForSelector('a-scene[data-loaded="true"]', { state: 'attached', timeout: 30_000 });
    const first = await p.evaluate(() => (window as any).xrealm.session().token as string);
    expect(JSON.parse(Buffer.from(first.split('.')[1], 'base64url').toString()).exp * 1000, 'the scene token capped').toBe(exp);
    await p.evaluate(() => {
      const st = document.querySelector('#xr-status')!;
      const w = window as any;
      w.states = [];
      new MutationObserver(() => w.states.push([st.getAttribute('data-state'), Date.now()])).observe(st, { attributes: true, attributeFilter: ['data-state'] });
    });
    // the renewal was asked for, and the token expired: the connection is gone
    await waitFor('the sign-in\'s end', async () => asked.length >= 2 && Date.now() > exp + 1_000 && (await p.getAttribute('#xr-status', 'data-state')) !== 'connected', 40_000);
    const states: [string, number][] = await p.evaluate(() => (window as any).states);
    const before = states.filter(([, at]) => at < exp);
    expect(before.map(([s]) => s), 'no reconnection before the end').toEqual([]);
    expect(asked.filter((at) => at < exp).length, 'the first token and one renewal').toBe(2);
    // and then the page says why it cannot go on
    await waitFor('failed', async () => (await p.getAttribute('#xr-status', 'data-state')) === 'failed', 30_000);
    expect(await p.textContent('#xr-error')).toMatch(/stored sign-in token was refused/);
  });
});

describe('token renewal, publish unacknowledged', () => {
  it('a publish whose acknowledgement a renewal leaves behind fails with a message (it did not stay pending for ever)', { timeout: 120_000 }, async () => {
    // The renewal's end(false) waits for the acknowledgement; when the
    // socket closes first, or is cut, mqtt.js drops the connection with
    // its QoS 1 publishes unsettled: the editor's Create or Apply then
    // said nothing, and the change was not stored.
    const short = await startServer({ args: ['--token-ttl', '10s'] });
    try {
      const carol = short.token('carol', 'carol/renew', 'editor');
      const p = await newPage();
      await p.goto(`${short.url}/carol/renew/edit?quality=low&token=${carol}`);
      await p.waitForSelector('a-scene[data-loaded="true"]', { state: 'attached', timeout: 30_000 });
      const first = await p.evaluate(() => (window as any).xrealm.session().token);
      await p.evaluate(() => {
        const w = window as any;
        const c = w.xrealm.bus.client;
        const ids = new Set(Object.keys(c.outgoing));
        w.unacked = w.xrealm.publishObject({ object_id: 'unacked', action: 'create', type: 'object', persist: true, data: { object_type: 'box' } })
          .then(() => 'stored', (e: Error) => `failed: ${e.message}`);
        // its PUBACK is not seen: the entry moves to an id the server never acknowledges
        const id = Object.keys(c.outgoing).find((k) => !ids.has(k))!;
        c.outgoing[65000] = c.outgoing[id];
        delete c.outgoing[id];
        w.settled = null;
        w.unacked.then((r: string) => (w.settled = r));
      });
      await waitFor('a renewed connection', async () => {
        const t = await p.evaluate(() => (window as any).xrealm.session()?.token);
        return t && t !== first && (await p.getAttribute('#xr-status', 'data-state')) === 'connected';
      }, 40_000);
      const settled = await waitFor('the publish settled', () => p.evaluate(() => (window as any).settled as string | null), 10_000);
      expect(settled).toMatch(/^failed: the connection was replaced \(token renewal\) before the server confirmed it/);
    } finally {
      await short.stop();
    }
  });
});

describe('layout', () => {
  it('the side panel starts hidden on a phone-sized screen, and Panel shows and hides it', async () => {
    const phone = await open('/public/layout', { width: 390, height: 700 });
    expect(await phone.isVisible('#xr-side')).toBe(false);
    expect(await phone.getAttribute('#xr-side-toggle', 'aria-pressed')).toBe('false');
    await phone.click('#xr-side-toggle');
    expect(await phone.isVisible('#xr-side')).toBe(true);
    expect(await phone.getAttribute('#xr-side-toggle', 'aria-pressed')).toBe('true');
    // the top bar stays one line: nothing wraps below its 38 px
    expect(await phone.$eval('#xr-top', (el) => el.scrollHeight)).toBeLessThanOrEqual(38);
    // the panel spans the top; the VR button keeps to the bottom corner
    const phoneVR = (await phone.locator('.a-enter-vr-button').first().boundingBox())!;
    expect(phoneVR.x + phoneVR.width).toBeGreaterThan(390 - 40);
    const wide = await open('/public/layout');
    expect(await wide.isVisible('#xr-side')).toBe(true);
    // the VR button stays clear of the side panel, and goes back to the
    // corner while the panel is hidden
    const vr = wide.locator('.a-enter-vr-button').first();
    const width = wide.viewportSize()!.width;
    const side = (await wide.locator('#xr-side').boundingBox())!;
    const beside = (await vr.boundingBox())!;
    expect(beside.x + beside.width).toBeLessThanOrEqual(side.x);
    await wide.click('#xr-side-toggle');
    expect(await wide.isVisible('#xr-side')).toBe(false);
    const corner = (await vr.boundingBox())!;
    expect(corner.x + corner.width).toBeGreaterThan(width - 40);
    await close(phone);
    await close(wide);
  });

  it('the editor panel has the same control: Editor shows and hides it, and on a phone one panel shows at a time', async () => {
    const wide = await open('/public/layout/edit');
    expect(await wide.isVisible('#xr-editor')).toBe(true);
    expect(await wide.getAttribute('#xr-editor-toggle', 'aria-pressed')).toBe('true');
    // the state shows without colour too: a filled dot while pressed, a
    // hollow one while not, as on the Microphone, Camera and Publish
    // buttons; the dot is not part of the button's name
    expect(await toggleMark(wide, '#xr-editor-toggle')).toBe(MARK_ON);
    for (const off of ['#xr-mic', '#xr-cam', '#xr-pcpub']) expect(await toggleMark(wide, off)).toBe(MARK_OFF);
    expect(await wide.getByRole('button', { name: 'Editor', exact: true, pressed: true }).count()).toBe(1);
    await wide.click('#xr-editor-toggle');
    expect(await wide.isVisible('#xr-editor')).toBe(false);
    expect(await wide.getAttribute('#xr-editor-toggle', 'aria-pressed')).toBe('false');
    expect(await toggleMark(wide, '#xr-editor-toggle')).toBe(MARK_OFF);
    expect(await toggleMark(wide, '#xr-side-toggle')).toBe(MARK_ON);
    expect(await wide.isVisible('#xr-side')).toBe(true); // the other panel stays
    await wide.click('#xr-editor-toggle');
    expect(await wide.isVisible('#xr-editor')).toBe(true);

    const phone = await open('/public/layout/edit', { width: 390, height: 700 });
    expect(await phone.isVisible('#xr-editor')).toBe(false);
    expect(await phone.isVisible('#xr-side')).toBe(false);
    await phone.click('#xr-editor-toggle');
    expect(await phone.isVisible('#xr-editor')).toBe(true);
    // it spans the width and leaves most of the view free
    const box = (await phone.locator('#xr-editor').boundingBox())!;
    expect(box.x + box.width).toBeGreaterThan(370);
    expect(box.y + box.height).toBeLessThan(0.6 * 700);
    await phone.click('#xr-side-toggle');
    expect(await phone.isVisible('#xr-side')).toBe(true);
    expect(await phone.isVisible('#xr-editor')).toBe(false);
    expect(await phone.getAttribute('#xr-editor-toggle', 'aria-pressed')).toBe('false');
    expect(await phone.$eval('#xr-top', (el) => el.scrollHeight)).toBeLessThanOrEqual(38);
    // the last top-bar button stays on screen (it stood 5 px past the edge),
    // also with the long status of a lost connection (330 px of text)
    const right = () => phone.$eval('#xr-side-toggle', (el) => el.getBoundingClientRect().right);
    expect(await right()).toBeLessThanOrEqual(390);
    // and the name field keeps a width that shows a guest's name (it was
    // squeezed to 60 px, 48 px of text)
    const nameWidth = () => phone.$eval('#xr-name', (el) => el.getBoundingClientRect().width);
    expect(await nameWidth()).toBeGreaterThanOrEqual(88);
    await phone.$eval('#xr-status', (el) => { el.textContent = 'Disconnected (connection lost); reconnecting in 16s…'; });
    expect(await right()).toBeLessThanOrEqual(390);
    expect(await nameWidth()).toBeGreaterThanOrEqual(88);
    await close(phone);
    await close(wide);
  });
});

describe('interest management', () => {
  it('in a kNN scene, a page draws only the avatars in its interest set', async () => {
    // The owner of namespace "public" turns on kNN interest with k = 1.
    const owner = srv.token('public', 'public/crowd', 'editor');
    const r = await fetch(`${srv.url}/scenes/public/crowd/settings`, {
      method: 'PUT',
      headers: { Authorization: `Bearer ${owner}`, 'Content-Type': 'application/json' },
      body: JSON.stringify({ public_read: true, anonymous_users: true, editors: [], viewers: [],
        interest: { mode: 'knn', k: 1, rate_hz: 10, hysteresis_ms: 100 } }),
    });
    expect(r.status).toBe(200);
    const a = await open('/public/crowd', { quality: 'low' });
    const b = await open('/public/crowd', { quality: 'low' });
    const c = await open('/public/crowd', { quality: 'low' });
    // A and B stand together; C is far away. A's nearest is B, B's is A,
    // and C's is B.
    await placeCamera(a, 0, 1.6, 0);
    await placeCamera(b, 1, 1.6, 0);
    await placeCamera(c, 50, 1.6, 0);
    const [sa, sb, sc] = [await session(a), await session(b), await session(c)];
    const avatar = (p: Page, s: { userClient: string }) => p.$(`[data-avatar-for="${s.userClient}"]`);
    await waitFor('A draws B', () => avatar(a, sb));
    await waitFor('B draws A', () => avatar(b, sa));
    await waitFor('C draws B', () => avatar(c, sb));
    // Avatars seen before the sets settled go once their senders have been
    // silent for AVATAR_STALE_MS (2.5 s), long before the 5 s ttl of their
    // poses; then each page draws only the senders in its set.
    await waitFor('A stops drawing C', async () => !(await avatar(a, sc)), 8_000);
    await waitFor('B stops drawing C', async () => !(await avatar(b, sc)), 8_000);
    await waitFor('C stops drawing A', async () => !(await avatar(c, sa)), 8_000);
    // C keeps sending a heartbeat pose every second: without filtering its
    // avatar would be back on A and B within this wait.
    await a.waitForTimeout(2500);
    expect(await avatar(a, sc)).toBeNull();
    expect(await avatar(b, sc)).toBeNull();
    expect(await avatar(a, sb)).toBeTruthy();
    expect(await avatar(c, sb)).toBeTruthy();
  }, 90_000);
});

describe('objects', () => {
  it('a client spamming invalid messages gets a few console warnings, then counts', async () => {
    const a = await open('/public/objects');
    expectConsole(a, /invalid message/);
    const topic = 'realm/s/public/objects/o/pyClient-000001/spam';
    for (let i = 0; i < 120; i++) await bot.publishAsync(topic + i, '{not json', { qos: 0 });
    await publish('objects', { object_id: 'after-spam', action: 'create', type: 'object', data: { object_type: 'box', position: { x: 0, y: 1, z: -9 } } }, 0);
    await a.waitForSelector('[data-object-id="after-spam"]', { state: 'attached' });
    await waitFor('every invalid message counted', () => a.evaluate(() => (window as any).xrealm.bus.invalid >= 120));
    const said = warnings.get(a)!.filter((w) => w.includes('invalid message'));
    // five in full (the fifth says that more are counted), then one line at 10 and at 100
    expect(said.filter((w) => w.startsWith('warning: xrealm: ignored an invalid message on ')).length, said.join('\n')).toBe(5);
    expect(said[4]).toContain('more are counted in xrealm.bus.invalid');
    expect(said.slice(5).map((w) => w.match(/xrealm: (\d+) invalid messages ignored so far/)?.[1]), said.join('\n')).toEqual(['10', '100']);
  }, 60_000);

  it('a third client creates persisted objects; pages render them, and a later page too', async () => {
    const a = await open('/public/objects', { width: 640, height: 400 });
    const b = await open('/public/objects', { width: 640, height: 400 });
    for (const p of [a, b]) expectConsole(p, /ignored an invalid message/);
    // Apart, so that no avatar stands between a page and the box, which shows left of the side panel.
    await placeCamera(a, 1.5, 1.6, 0);
    await placeCamera(b, 0.5, 1.6, 1.5);
    // A child before its parent, then the parent: the child waits for it.
    await publish('objects', { object_id: 'hat', action: 'create', type: 'object', persist: true, data: { object_type: 'cone', parent: 'redbox', position: { x: 0, y: 0.8, z: 0 }, radiusBottom: 0.3, height: 0.5, color: '#0000ff' } });
    await publish('objects', {
      object_id: 'redbox', action: 'create', type: 'object', persist: true,
      data: { object_type: 'box', position: { x: 0, y: 1.6, z: -2.5 }, rotation: { x: 0, y: 0, z: 0, w: 1 }, material: { color: '#ff0000', shader: 'flat' }, 'click-listener': true },
    });
    for (const p of [a, b]) {
      await p.waitForSelector('[data-object-id="redbox"]', { state: 'attached' });
      const geo = await p.evaluate(() => (document.querySelector('[data-object-id="redbox"]') as any).getAttribute('geometry'));
      expect(geo.primitive).toBe('box');
      const mat = await p.evaluate(() => (document.querySelector('[data-object-id="redbox"]') as any).getAttribute('material'));
      expect(mat.color).toBe('#ff0000');
      await waitFor('child under parent', () => p.$('[data-object-id="redbox"] > [data-object-id="hat"]'));
      const hat = (await worldPos(p, '[data-object-id="hat"]'))!;
      expect(hat.y).toBeCloseTo(2.4, 2);
      await waitForColour(p, 'red', 'red in the middle of the screenshot');
    }
    // An update merges; null removes a key.
    await publish('objects', { object_id: 'redbox', action: 'update', type: 'object', persist: true, data: { material: { color: '#0000ff' }, 'click-listener': null } });
    await waitForColour(a, 'blue', 'blue in the middle of the screenshot');
    expect(await a.evaluate(() => (document.querySelector('[data-object-id="redbox"]') as any).getAttribute('material').shader)).toBe('flat');
    expect(await a.$eval('[data-object-id="redbox"]', (e) => e.classList.contains('clickable'))).toBe(false);
    await publish('objects', { object_id: 'redbox', action: 'update', type: 'object', persist: true, data: { material: { color: '#ff0000' }, 'click-listener': true } });

    // Invalid messages are ignored with a warning and break nothing.
    const topic = 'realm/s/public/objects/o/pyClient-000001/';
    await bot.publishAsync(topic + 'x1', '{not json', { qos: 0 });
    await bot.publishAsync(topic + 'x2', JSON.stringify({ object_id: 'other', action: 'create', data: { object_type: 'box' } }), { qos: 0 });
    await bot.publishAsync(topic + 'x3', JSON.stringify({ object_id: 'x3', action: 'create', type: 'object', data: { object_type: 'box', position: 'up' } }), { qos: 0 });
    await publish('objects', { object_id: 'after-bad', action: 'create', type: 'object', data: { object_type: 'sphere', position: { x: 2, y: 1, z: -4 } } }, 0);
    await a.waitForSelector('[data-object-id="after-bad"]', { state: 'attached' });
    expect(await a.evaluate(() => (window as any).xrealm.bus.invalid)).toBeGreaterThanOrEqual(2);
    expect(warnings.get(a)!.some((w) => w.includes('ignored an invalid message'))).toBe(true);
    expect(await a.$('[data-object-id="other"]')).toBeNull();

    // A page that loads later shows the persisted objects, parents first.
    const c = await open('/public/objects', { width: 640, height: 400 });
    await placeCamera(c, 0, 1.6, 1);
    await c.waitForSelector('[data-object-id="redbox"] > [data-object-id="hat"]', { state: 'attached' });
    await waitForColour(c, 'red', 'red in the later page');
    expect(await c.$('[data-object-id="after-bad"]')).toBeNull(); // it was not persisted
    await close(c);
    await close(b);
    keep.add(a);
    (globalThis as any).objectsPage = a;
  });

  it('a parent cycle does not stop the page drawing the objects, live or loaded from the store', async () => {
    const a = await open('/public/cycle');
    const c = await mqttClient(srv, 'bot', srv.token('bot', 'public/cycle', 'editor'), 'cycle-bot');
    const send = (m: Record<string, unknown>) =>
      c.publishAsync(`realm/s/public/cycle/o/cycle-bot/${m.object_id}`, JSON.stringify({ type: 'object', persist: true, ...m }), { qos: 1 });
    // b's parent is a, then a's parent b: the server takes both.
    await send({ object_id: 'cyc-a', action: 'create', data: { object_type: 'box', position: { x: -1, y: 1, z: -4 } } });
    await send({ object_id: 'cyc-b', action: 'create', data: { object_type: 'sphere', parent: 'cyc-a', position: { x: 0, y: 1, z: 0 } } });
    await a.waitForSelector('[data-object-id="cyc-a"] > [data-object-id="cyc-b"]', { state: 'attached' });
    await send({ object_id: 'cyc-a', action: 'update', data: { parent: 'cyc-b', color: '#00ff00' } });
    await send({ object_id: 'cyc-z', action: 'create', data: { object_type: 'box', position: { x: 1, y: 1, z: -4 } } });
    await a.waitForSelector('[data-object-id="cyc-z"]', { state: 'attached' });
    // the update applied: a stays where it was, with its new colour
    expect(await a.evaluate(() => (document.querySelector('[data-object-id="cyc-a"]') as any).getAttribute('material').color)).toBe('#00ff00');
    expect(await a.$('#xr-objects > [data-object-id="cyc-a"] > [data-object-id="cyc-b"]')).toBeTruthy();
    expectConsole(a, /cyc-a: its parent cyc-b is inside it \(a parent cycle\)/);
    // A later page loads them from the store: every object is drawn, and no error shows.
    const b = await open('/public/cycle');
    expectConsole(b, /parent cycle/);
    for (const id of ['cyc-a', 'cyc-b', 'cyc-z']) {
      expect(await b.evaluate((id) => {
        let el = document.querySelector(`[data-object-id="${id}"]`) as any;
        const o = el?.object3D;
        for (; el && el.id !== 'xr-objects'; el = el.parentElement) if (el.dataset.role === 'orphans') return 'hidden';
        return o ? 'drawn' : 'missing';
      }, id), id).toBe('drawn');
    }
    expect(await b.isVisible('#xr-error')).toBe(false);
    for (const id of ['cyc-a', 'cyc-b', 'cyc-z']) await send({ object_id: id, action: 'delete' });
    c.end(true);
  });

  it('objects waiting for their parent move in when it is drawn: parents late, deleted and made again, no longer objects, or changed', async () => {
    const a = await open('/public/waiting');
    const c = await mqttClient(srv, 'bot', srv.token('bot', 'public/waiting', 'editor'), 'waiting-bot');
    const send = (m: Record<string, unknown>) =>
      c.publishAsync(`realm/s/public/waiting/o/waiting-bot/${m.object_id}`, JSON.stringify({ type: 'object', ...m }), { qos: 1 });
    const box = (id: string, parent?: string) => send({ object_id: id, action: 'create', data: { object_type: 'box', ...(parent ? { parent } : {}) } });
    /** Where each object's entity is: in its parent's (the parent's id), at the root, waiting (not drawn) or nowhere. */
    const tree = (ids: string[]) => a.evaluate((ids) => Object.fromEntries(ids.map((id) => {
      const el: HTMLElement | undefined = (window as any).xrealm.renderer.els.get(id);
      const p = el?.parentElement;
      return [id, !el ? 'none' : !p ? 'left out' : p.id === 'xr-objects' ? 'root' : p.dataset.role === 'orphans' ? 'waiting' : p.dataset.objectId ?? '?'];
    })), ids);
    const expectTree = async (what: string, want: Record<string, string>) => {
      let got: Record<string, string> = {};
      try {
        await waitFor(what, async () => JSON.stringify(got = await tree(Object.keys(want))) === JSON.stringify(want), 10_000);
      } catch {
        expect(got, what).toEqual(want);
      }
    };
    try {
      // children before their parent
      await box('kid', 'p');
      await box('grandkid', 'kid');
      await expectTree('the children wait', { p: 'none', kid: 'waiting', grandkid: 'kid' });
      await box('p');
      await expectTree('the parent arrived', { p: 'root', kid: 'p', grandkid: 'kid' });
      // the parent deleted (with its descendants) and made again, its child first
      await send({ object_id: 'p', action: 'delete' });
      await expectTree('all deleted', { p: 'none', kid: 'none', grandkid: 'none' });
      await box('kid', 'p');
      await expectTree('the child waits again', { p: 'none', kid: 'waiting' });
      await box('p');
      await expectTree('the parent made again', { p: 'root', kid: 'p' });
      // the parent no longer a scene object (not drawn), then one again: its child waits, then moves in
      await box('grandkid', 'kid');
      await send({ object_id: 'p', action: 'create', type: 'program', data: { parent: null } });
      await expectTree('the parent is not drawn', { p: 'none', kid: 'waiting', grandkid: 'kid' });
      await box('p');
      await expectTree('the parent is drawn again', { p: 'root', kid: 'p', grandkid: 'kid' });
      // a waiting child whose parent id changes: to one drawn, and to one missing
      await box('m2');
      await box('w', 'm1');
      await expectTree('w waits for m1', { m2: 'root', w: 'waiting' });
      await send({ object_id: 'w', action: 'update', data: { parent: 'm2' } });
      await expectTree('w moved to m2', { m2: 'root', w: 'm2' });
      await box('m1');
      await expectTree('m1 does not take w', { m1: 'root', m2: 'root', w: 'm2' });
      await send({ object_id: 'w', action: 'update', data: { parent: 'm3' } });
      await expectTree('w waits for m3', { m1: 'root', w: 'waiting' });
      await send({ object_id: 'm1', action: 'update', data: { color: '#ff0000' } });
      await send({ object_id: 'm2', action: 'update', data: { color: '#ff0000' } });
      await box('m4');
      await expectTree('other objects drawn do not take w', { m1: 'root', m2: 'root', m4: 'root', w: 'waiting' });
      await box('m3', 'm4');
      await expectTree('m3 arrived', { m3: 'm4', w: 'm3' });
      expect(await a.evaluate(() => (window as any).xrealm.renderer.waiting), 'objects waiting').toBe(0);
    } finally {
      c.end(true);
    }
  });

  it('a chain of 10,000 objects, each the parent of the next, is drawn 100 deep, live children first or loaded, and the pages go on', { timeout: 240_000 }, async () => {
    // (A-Frame and three.js walk the tree by recursion: all of such a
    // chain drawn crashes the page; the client's walks take no stack)
    const n = 10_000;
    const ids = Array.from({ length: n }, (_, i) => `c${i}`);
    const a = await open('/public/chain');
    expectConsole(a, /object c100 is nested deeper than 100 objects \(in c99\)/);
    const c = await mqttClient(srv, 'bot', srv.token('bot', 'public/chain', 'editor'), 'chain-bot');
    const send = (m: Record<string, unknown>) =>
      c.publishAsync(`realm/s/public/chain/o/chain-bot/${m.object_id}`, JSON.stringify({ type: 'object', persist: true, ...m }), { qos: 1 });
    /** What a page draws: the objects in the document, the deepest one, how many wait, and that frames are drawn. */
    const drawn = (p: Page) => p.evaluate(async () => {
      const x = (window as any).xrealm;
      const els = [...document.querySelectorAll('#xr-objects [data-object-id]')] as HTMLElement[];
      let deepest = '', depth = 0;
      for (const el of els) {
        let d = 0;
        for (let e: HTMLElement | null = el; e && e.id !== 'xr-objects'; e = e.parentElement) d++;
        if (d > depth) [deepest, depth] = [el.dataset.objectId!, d];
      }
      await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
      return { objects: x.model.objects.size, inDocument: els.length, deepest, depth, waiting: x.renderer.waiting };
    });
    try {
      // live, children first: each waits for its parent until c0 arrives
      await Promise.all([...ids].reverse().map((id, i) => send({
        object_id: id, action: 'create', data: { object_type: 'box', position: { x: 0, y: 0.01, z: 0 }, ...(i < n - 1 ? { parent: `c${n - 2 - i}` } : {}) },
      })));
      await waitFor('the chain received', () => a.evaluate((n) => (window as any).xrealm.model.objects.size === n, n), 60_000);
      expect(await drawn(a)).toEqual({ objects: n, inDocument: 100, deepest: 'c99', depth: 100, waiting: 0 });
      // loaded by the editor, with its object tree
      const b = await open('/public/chain/edit');
      expectConsole(b, /object c100 is nested deeper than 100 objects \(in c99\)/);
      expect(await drawn(b)).toEqual({ objects: n, inDocument: 100, deepest: 'c99', depth: 100, waiting: 0 });
      await b.waitForSelector('#xr-tree [data-tree-id="c9999"]', { state: 'attached' });
      expect(await b.evaluate(() => {
        const li = (id: string) => document.querySelector(`#xr-tree [data-tree-id="${id}"]`)!;
        const parentItem = (id: string) => (li(id).parentElement!.closest('li') as HTMLElement | null)?.dataset.treeId;
        return { items: document.querySelectorAll('#xr-tree [data-tree-id]').length, c99: parentItem('c99'), c100: parentItem('c100'), c9999: parentItem('c9999') };
      }), 'the tree: nested 100 deep, the objects below listed under the 100th').toEqual({ items: n, c99: 'c98', c100: 'c99', c9999: 'c99' });
      await b.click('#xr-tree [data-tree-id="c5000"] > .tree-item');
      await b.waitForSelector('#f-form:has-text("c5000")');
      // moved up, the objects below it come into the document down to the limit
      await send({ object_id: 'c50', action: 'update', data: { parent: null } });
      for (const p of [a, b]) {
        await waitFor('c50 at the root', () => p.evaluate(() => document.querySelector('#xr-objects > [data-object-id="c50"]') !== null));
        expect(await drawn(p)).toEqual({ objects: n, inDocument: 150, deepest: 'c149', depth: 100, waiting: 0 });
      }
      // and back
      await send({ object_id: 'c50', action: 'update', data: { parent: 'c49' } });
      for (const p of [a, b]) {
        await waitFor('c50 in c49', () => p.evaluate(() => document.querySelector('[data-object-id="c49"] > [data-object-id="c50"]') !== null));
        expect(await drawn(p)).toEqual({ objects: n, inDocument: 100, deepest: 'c99', depth: 100, waiting: 0 });
      }
      // deleted with its descendants
      await send({ object_id: 'c0', action: 'delete' });
      for (const p of [a, b]) {
        await waitFor('the chain deleted', () => p.evaluate(() => (window as any).xrealm.model.objects.size === 0));
        expect(await drawn(p)).toEqual({ objects: 0, inDocument: 0, deepest: '', depth: 0, waiting: 0 });
        expect(await p.evaluate(() => (window as any).xrealm.renderer.els.size)).toBe(0);
      }
    } finally {
      c.end(true);
    }
  });

  it('a scene whose stored objects cannot be loaded says so, with Retry, and Retry loads them', async () => {
    const c = await mqttClient(srv, 'bot', srv.token('bot', 'public/unloadable', 'editor'), 'unloadable-bot');
    await c.publishAsync('realm/s/public/unloadable/o/unloadable-bot/kept', JSON.stringify({
      object_id: 'kept', action: 'create', type: 'object', persist: true, data: { object_type: 'box', position: { x: 0, y: 1, z: -3 } },
    }), { qos: 1 });
    c.end(true);
    const p = await newPage();
    let broken = true;
    await p.route('**/persist/public/unloadable', (r) => (broken
      ? r.fulfill({ status: 500, contentType: 'application/json', body: '{"error":"the store is unavailable"}' })
      : r.continue()));
    expectConsole(p, /status of 500/, /loading the persisted scene failed/);
    await p.goto(`${srv.url}/public/unloadable?quality=low`);
    await p.waitForSelector('a-scene[data-loaded="true"]', { state: 'attached', timeout: 30_000 });
    expect(await p.getAttribute('#xr-status', 'data-state')).toBe('connected');
    expect(await p.isVisible('#xr-error')).toBe(true);
    expect(await p.textContent('#xr-error')).toContain("Could not load the scene's objects: GET /persist/public/unloadable: the store is unavailable");
    broken = false;
    await p.click('#xr-error button:has-text("Retry")');
    await p.waitForSelector('[data-object-id="kept"]', { state: 'attached' });
    expect(await p.isVisible('#xr-error')).toBe(false);
  });

  it('an object with millions of segments is drawn with a bounded number, and does not stall the pages', async () => {
    const c = await mqttClient(srv, 'bot', srv.token('bot', 'public/segments', 'editor'), 'segments-bot');
    const send = (id: string, data: Record<string, unknown>) => c.publishAsync(`realm/s/public/segments/o/segments-bot/${id}`,
      JSON.stringify({ object_id: id, action: 'create', type: 'object', persist: true, data: { position: { x: 0, y: 1, z: -4 }, ...data } }), { qos: 1 });
    await send('disc', { object_type: 'circle', segments: 1e7 });
    await send('ball', { object_type: 'sphere', segmentsWidth: '1e9', geometry: { segmentsHeight: 1e6 } });
    await send('crate', { object_type: 'box', segmentsWidth: 1e6, segmentsDepth: 'many' });
    await send('gem', { object_type: 'icosahedron', detail: 1000 });
    c.end(true);
    const p = await open('/public/segments');
    const geo = (id: string) => p.evaluate((id) => (document.querySelector(`[data-object-id="${id}"]`) as any).getAttribute('geometry'), id);
    for (const id of ['disc', 'ball', 'crate', 'gem']) await p.waitForSelector(`[data-object-id="${id}"]`, { state: 'attached' });
    expect((await geo('disc')).segments).toBe(256);
    expect([(await geo('ball')).segmentsWidth, (await geo('ball')).segmentsHeight]).toEqual([256, 256]);
    expect([(await geo('crate')).segmentsWidth, (await geo('crate')).segmentsDepth]).toEqual([20, 1]); // A-Frame's box takes at most 20; 'many' is the default
    expect((await geo('gem')).detail).toBe(5);
  });

  it('an object that cannot be drawn does not keep a later page from drawing the others', async () => {
    const c = await mqttClient(srv, 'bot', srv.token('bot', 'public/undrawable', 'editor'), 'undrawable-bot');
    const send = (id: string, data: Record<string, unknown>) => c.publishAsync(`realm/s/public/undrawable/o/undrawable-bot/${id}`,
      JSON.stringify({ object_id: id, action: 'create', type: 'object', persist: true, data }), { qos: 1 });
    // A-Frame's light throws on a target that is not a CSS selector.
    await send('a-lamp', { object_type: 'light', type: 'spot', target: '[[not a selector' });
    for (const id of ['m-box', 'z-box']) await send(id, { object_type: 'box', position: { x: 0, y: 1, z: -4 } });
    // a child of the lamp: the lamp is placed all the same, with its child
    // (the lamp's throw skipped its placement, and the child waited, unseen)
    await send('lamp-child', { object_type: 'box', parent: 'a-lamp', position: { x: 0, y: 1, z: 0 } });
    c.end(true);
    const p = await open('/public/undrawable');
    expectConsole(p, /object a-lamp could not be drawn: .*not a valid selector/);
    for (const id of ['m-box', 'z-box']) await p.waitForSelector(`#xr-objects > [data-object-id="${id}"]`, { state: 'attached', timeout: 5000 });
    await p.waitForSelector('#xr-objects > [data-object-id="a-lamp"] > [data-object-id="lamp-child"]', { state: 'attached', timeout: 5000 });
    expect(await p.isVisible('#xr-error')).toBe(false);
  });

  it('values A-Frame throws on when an entity loads (shader, light type, animation property) are left out, with no uncaught error', async () => {
    const p = await open('/public/throwing');
    const c = await mqttClient(srv, 'bot', srv.token('bot', 'public/throwing', 'editor'), 'throwing-bot');
    const send = (id: string, data: Record<string, unknown>) => c.publishAsync(`realm/s/public/throwing/o/throwing-bot/${id}`,
      JSON.stringify({ object_id: id, action: 'create', type: 'object', data: { position: { x: 0, y: 1, z: -4 }, ...data } }), { qos: 1 });
    const ids = { 'lamp-type': { object_type: 'light', type: 'nope' }, 'lamp-number': { object_type: 'light', light: { type: 5, intensity: 0.5 } },
      'box-shader': { object_type: 'box', material: { shader: 'nope', color: '#00ff00' } }, 'box-anim': { object_type: 'box', animation: { property: ['x'], to: 1 } } };
    expectConsole(p, /xrealm: object (lamp-type|lamp-number): unknown light type/, /xrealm: object box-shader: unknown material shader "nope"/,
      /xrealm: object box-anim: animation property \["x"\] is not a string/);
    for (const [id, data] of Object.entries(ids)) await send(id, data);
    c.end(true);
    for (const id of Object.keys(ids)) {
      await waitFor(`${id} loaded`, () => p.evaluate((id) => (document.querySelector(`[data-object-id="${id}"]`) as any)?.hasLoaded, id));
    }
    // what is left is drawn
    expect(await p.evaluate(() => (document.querySelector('[data-object-id="box-shader"]') as any).getAttribute('material').color)).toBe('#00ff00');
    expect(await p.evaluate(() => (document.querySelector('[data-object-id="lamp-number"]') as any).getAttribute('light').intensity)).toBe(0.5);
    await p.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r))));
  });

  it('clicking an object with click-listener publishes clientEvents', async () => {
    const a: Page = (globalThis as any).objectsPage;
    expect(a, 'needs the page of the previous test').toBeDefined();
    keep.delete(a);
    const s = await session(a);
    const events: any[] = [];
    const sub = await mqttClient(srv, 'bot', srv.token('bot', 'public/objects', 'viewer'), 'subscriber-1');
    sub.on('message', (t, p) => {
      const m = JSON.parse(p.toString());
      if (m.action === 'clientEvent') events.push({ topic: t, ...m });
    });
    await sub.subscribeAsync('realm/s/public/objects/o/#');
    await waitFor('clickable again', () => a.$('[data-object-id="redbox"].clickable'));
    const at = await screenPoint(a, '[data-object-id="redbox"]');
    // What the mouse cursor points at: its raycaster finds it in the scene's
    // tick after a move, and a press goes to what it found last (a loaded
    // machine may draw no frame for a while).
    const pointedAt = () => a.evaluate(() => (document.querySelector('a-scene') as any).components.cursor.intersectedEl?.dataset.objectId ?? null);
    // As a person does: point at it, then press.
    await a.mouse.move(at.x - 5, at.y - 5);
    await a.mouse.move(at.x, at.y, { steps: 3 });
    await waitFor('the cursor on the box', async () => (await pointedAt()) === 'redbox', 10_000).catch(async (e) => {
      throw new Error(`${e.message}: it points at ${await pointedAt()}`);
    });
    await a.mouse.down();
    await a.mouse.up();
    const down = await waitFor('mousedown', () => events.find((e) => e.type === 'mousedown'));
    const up = await waitFor('mouseup', () => events.find((e) => e.type === 'mouseup'));
    expect(down.object_id).toBe('redbox');
    expect(down.topic).toBe(`realm/s/public/objects/o/${s.userClient}/redbox`);
    expect(down.data.source).toBe(s.camid);
    expect(down.data.position.z).toBeGreaterThan(-2.05); // on the box's front face
    expect(down.data.position.z).toBeLessThan(-1.95);
    expect(down.data.clickPos.y).toBeCloseTo(1.6, 1);
    expect(up.object_id).toBe('redbox');
    // A click on empty sky sends nothing.
    events.length = 0;
    await a.mouse.move(at.x, 60, { steps: 3 });
    await waitFor('the cursor off the box', async () => (await pointedAt()) === null, 10_000).catch(async (e) => {
      throw new Error(`${e.message}: it points at ${await pointedAt()}`);
    });
    await a.mouse.down();
    await a.mouse.up();
    await a.waitForTimeout(500);
    expect(events).toHaveLength(0);
    sub.end(true);
    await close(a);
  });
});

describe('editor', () => {
  it('creates, edits, duplicates and deletes objects; others and GET /persist see it', { timeout: 180_000 }, async () => {
    const alice = srv.token('alice', 'alice/lab', 'editor');
    const ed = await open(`/alice/lab/edit?token=${alice}`, { width: 1000, height: 700 });
    expect(ed.url()).not.toContain('token='); // taken out of the address bar
    await waitFor('editor role', async () => (await ed.getAttribute('#xr-who', 'data-role')) === 'editor');
    expect(await ed.isVisible('#xr-readonly')).toBe(false);
    const view = await open('/alice/lab');

    // Create.
    await ed.selectOption('#new-type', 'box');
    await ed.fill('#new-id', 'crate');
    await ed.click('#new-create');
    await view.waitForSelector('[data-object-id="crate"]', { state: 'attached' });
    await waitFor('crate stored', async () => (await persisted('alice', 'lab')).find((o) => o.object_id === 'crate'));
    await ed.waitForSelector('#f-form');

    // Edit with the form.
    await ed.fill('#f-position-x', '2');
    await ed.fill('#f-position-y', '0.5');
    await ed.fill('#f-scale-y', '2');
    await ed.fill('#f-color', '#00ff00');
    await ed.click('#f-apply');
    await waitFor('moved in the viewer', async () => Math.abs(((await worldPos(view, '[data-object-id="crate"]'))?.x ?? 0) - 2) < 1e-6);
    const stored = await waitFor('stored edit', async () => (await persisted('alice', 'lab')).find((o) => o.object_id === 'crate' && o.attributes.position.x === 2));
    expect(stored.attributes.material.color).toBe('#00ff00');
    expect(stored.attributes.scale).toEqual({ x: 1, y: 2, z: 1 });

    // Edit as JSON: invalid JSON is refused with a message, valid JSON replaces the object.
    await ed.fill('#f-json', '{"object_id": "crate", "data": {"object_type": "box", "position": {"x": "two"}}}');
    await ed.click('#f-apply-json');
    expect(await ed.textContent('#f-json-error')).toMatch(/object_type|position/);
    await ed.fill('#f-json', JSON.stringify({ object_id: 'crate', type: 'object', data: { object_type: 'cylinder', radius: 0.3, height: 1, position: { x: -1, y: 1, z: -3 }, material: { color: '#ffaa00' } } }));
    await ed.click('#f-apply-json');
    await waitFor('cylinder in the viewer', async () => (await view.evaluate(() => (document.querySelector('[data-object-id="crate"]') as any)?.getAttribute('geometry')?.primitive)) === 'cylinder');

    // A child, then duplicate the parent with its child.
    await ed.selectOption('#new-type', 'sphere');
    await ed.fill('#new-id', 'ball');
    await ed.click('#new-create');
    await ed.waitForSelector('[data-tree-id="ball"] .tree-item.selected');
    await ed.selectOption('#f-parent', 'crate');
    await ed.click('#f-apply');
    await view.waitForSelector('[data-object-id="crate"] > [data-object-id="ball"]', { state: 'attached' });
    await ed.click('[data-tree-id="crate"] > .tree-item');
    await ed.click('#f-duplicate');
    const copies = await waitFor('copies stored', async () => {
      const objs = await persisted('alice', 'lab');
      const c = objs.filter((o) => o.object_id.startsWith('crate-copy-') || o.object_id.startsWith('ball-copy-'));
      return c.length === 2 ? c : null;
    });
    const crateCopy = copies.find((o) => o.object_id.startsWith('crate-copy-'))!;
    expect(copies.find((o) => o.object_id.startsWith('ball-copy-'))!.attributes.parent).toBe(crateCopy.object_id);
    await view.waitForSelector(`[data-object-id="${crateCopy.object_id}"] > [data-object-id^="ball-copy-"]`, { state: 'attached' });

    // Delete with cascade (two clicks).
    await ed.click('[data-tree-id="crate"] > .tree-item');
    await ed.click('#f-delete');
    expect(await ed.textContent('#f-delete')).toContain('1 child');
    await ed.click('#f-delete');
    await waitFor('gone from the viewer', async () => !(await view.$('[data-object-id="crate"]')) && !(await view.$('[data-object-id="ball"]')));
    await waitFor('gone from the store', async () => {
      const ids = (await persisted('alice', 'lab')).map((o) => o.object_id);
      return !ids.includes('crate') && !ids.includes('ball') && ids.includes(crateCopy.object_id);
    });

    // Export, then import into another scene... here: import renamed objects into this one.
    const [download] = await Promise.all([ed.waitForEvent('download'), ed.click('#xr-export')]);
    const exported = JSON.parse(readFileSync((await download.path())!, 'utf8'));
    expect(exported.map((o: any) => o.object_id).sort()).toEqual(copies.map((o) => o.object_id).sort());
    const renamed = exported.map((o: any) => ({
      ...o, object_id: o.object_id.replace('-copy-', '-imported-'),
      attributes: { ...o.attributes, ...(o.attributes.parent ? { parent: o.attributes.parent.replace('-copy-', '-imported-') } : {}) },
    }));
    await ed.setInputFiles('#xr-import-file', { name: 'scene.json', mimeType: 'application/json', buffer: Buffer.from(JSON.stringify(renamed)) });
    await ed.click('#xr-import');
    await view.waitForSelector('[data-object-id^="crate-imported-"] > [data-object-id^="ball-imported-"]', { state: 'attached' });
    await waitFor('imported stored', async () => (await persisted('alice', 'lab')).filter((o) => o.object_id.includes('-imported-')).length === 2);
    keep.add(ed);
    (globalThis as any).editorPage = ed;
    await close(view);
  });

  it('what the user types in the form or the JSON stays while others change the object, and Apply sends only the fields changed', async () => {
    const alice = srv.token('alice', 'alice/form', 'editor');
    const ed = await open(`/alice/form/edit?token=${alice}`, { width: 1000, height: 700 });
    // A program that moves the object, as ARENA programs do.
    const prog = await mqttClient(srv, 'alice', alice, 'prog-1');
    const send = (m: Record<string, unknown>) => prog.publishAsync(`realm/s/alice/form/o/prog-1/${m.object_id}`, JSON.stringify({ type: 'object', persist: true, ...m }), { qos: 1 });
    await send({ object_id: 'mover', action: 'create', data: { object_type: 'box', position: { x: 0, y: 1, z: -3 }, scale: { x: 1, y: 1, z: 1 }, material: { color: '#ff0000' } } });
    await ed.click('[data-tree-id="mover"] > .tree-item');
    await ed.waitForSelector('#f-form');
    await ed.fill('#f-scale-y', '2');
    let x = 0;
    const move = async () => {
      x += 0.5;
      await send({ object_id: 'mover', action: 'update', data: { position: { x, y: 1, z: -3 } } });
      await waitFor(`the editor has x=${x}`, () => ed.evaluate((x) => (window as any).xrealm.model.objects.get('mover').data.position.x === x, x));
    };
    await move();
    await move();
    // The typed value and the focus stay; a note says the object changed.
    expect(await ed.inputValue('#f-scale-y')).toBe('2');
    expect(await ed.evaluate(() => document.activeElement?.id)).toBe('f-scale-y');
    expect(await ed.isVisible('#f-stale')).toBe(true);
    expect(await ed.textContent('#f-stale')).toContain('changed');
    await ed.press('#f-scale-y', 'Enter'); // submits the form
    const stored = await waitFor('scale stored', async () => (await persisted('alice', 'form')).find((o) => o.object_id === 'mover' && o.attributes.scale.y === 2));
    // The program's move is kept: the form sent the scale alone.
    expect(stored.attributes.position).toEqual({ x: 1, y: 1, z: -3 });
    expect(stored.attributes.material).toEqual({ color: '#ff0000' });
    // Once applied, the form shows the object again, with the others' changes.
    await waitFor('note gone', async () => !(await ed.isVisible('#f-stale')));
    await move();
    await waitFor('form follows the object', async () => (await ed.inputValue('#f-position-x')) === '1.5');
    // Untouched, the form follows the object and the focus stays where it was.
    await ed.focus('#f-position-z');
    await move();
    await waitFor('form follows the object', async () => (await ed.inputValue('#f-position-x')) === '2');
    expect(await ed.evaluate(() => document.activeElement?.id)).toBe('f-position-z');
    // The raw JSON too: edited text stays; Show theirs puts the object's back.
    const mine = '{"object_id": "mover", "type": "object", "data": {"object_type": "sphere"}}';
    await ed.fill('#f-json', mine);
    await move();
    expect(await ed.inputValue('#f-json')).toBe(mine);
    await ed.click('#f-stale button');
    expect(JSON.parse(await ed.inputValue('#f-json')).data.position.x).toBe(2.5);
    expect(await ed.isVisible('#f-stale')).toBe(false);
    // Apply with nothing changed sends nothing, and says so.
    await ed.click('#f-apply');
    await waitFor('nothing to apply', async () => (await ed.textContent('#xr-toasts'))?.includes('Nothing to apply'));
    prog.end(true);
  });

  it('an import that fails part way says how many objects it stored, and which one failed', async () => {
    const alice = srv.token('alice', 'alice/imports', 'editor');
    const ed = await newPage({ width: 1000, height: 700 });
    // the connection is cut as the third object goes out (its topic or its
    // payload, which mqtt.js may write apart), the first two acknowledged
    let cut = false;
    await ed.routeWebSocket(/\/mqtt/, (ws) => {
      const server = ws.connectToServer();
      ws.onMessage((m) => {
        if (!cut && (typeof m === 'string' ? m : m.toString('latin1')).includes('imp-3')) {
          cut = true;
          ws.close();
          server.close();
          return;
        }
        server.send(m);
      });
    });
    await ed.goto(`${srv.url}/alice/imports/edit?token=${alice}&quality=low`);
    await ed.waitForSelector('a-scene[data-loaded="true"]', { state: 'attached', timeout: 30_000 });
    const objs = [1, 2, 3, 4, 5].map((i) => ({ object_id: `imp-${i}`, type: 'object', attributes: { object_type: 'box', position: { x: i, y: 1, z: -3 } } }));
    await ed.setInputFiles('#xr-import-file', { name: 'five.json', mimeType: 'application/json', buffer: Buffer.from(JSON.stringify(objs)) });
    await ed.click('#xr-import');
    await waitFor('the import failed', async () => /Import failed: stored 2 of 5 objects; object imp-3 failed: /.test((await ed.textContent('#xr-toasts')) ?? ''));
    expect(cut).toBe(true);
    expect((await persisted('alice', 'imports')).map((o) => o.object_id).sort()).toEqual(['imp-1', 'imp-2']);
  });

  it('a viewer token cannot edit, in the UI or on the bus', async () => {
    const ed: Page = (globalThis as any).editorPage;
    expect(ed, 'needs the page of the previous test').toBeDefined();
    keep.delete(ed);
    const guest = await open('/alice/lab/edit');
    await waitFor('viewer role', async () => (await guest.getAttribute('#xr-who', 'data-role')) === 'viewer');
    expect(await guest.isVisible('#xr-readonly')).toBe(true);
    expect(await guest.textContent('#xr-readonly')).toContain('Read-only');
    expect(await guest.isDisabled('#new-create')).toBe(true);
    expect(await guest.isDisabled('#xr-import')).toBe(true);
    const some = (await persisted('alice', 'lab'))[0];
    await guest.click(`[data-tree-id="${some.object_id}"] > .tree-item`);
    expect(await guest.isDisabled('#f-delete')).toBe(true);
    expect(await guest.isDisabled('#f-apply-json')).toBe(true);

    // On the bus: the page's own connection, and a Node client with a viewer token.
    await guest.evaluate(() => (window as any).xrealm.publishObject({ object_id: 'hack-page', action: 'create', type: 'object', persist: true, data: { object_type: 'box' } }));
    await guest.evaluate((id) => (window as any).xrealm.publishObject({ object_id: id, action: 'delete', persist: true }), some.object_id);
    const viewer = await mqttClient(srv, 'mallory', srv.token('mallory', 'alice/lab', 'viewer'), 'mallory-1');
    await viewer.publishAsync('realm/s/alice/lab/o/mallory-1/hack-bus', JSON.stringify({ object_id: 'hack-bus', action: 'create', type: 'object', persist: true, data: { object_type: 'box' } }), { qos: 1 });
    await viewer.publishAsync(`realm/s/alice/lab/o/mallory-1/${some.object_id}`, JSON.stringify({ object_id: some.object_id, action: 'update', persist: true, data: { position: { x: 99, y: 0, z: 0 } } }), { qos: 1 });
    // A marker from the editor, sent after: once it is stored, the others were handled.
    await ed.evaluate(() => (window as any).xrealm.publishObject({ object_id: 'marker', action: 'create', type: 'object', persist: true, data: { object_type: 'entity' } }));
    const objs = await waitFor('marker stored', async () => {
      const o = await persisted('alice', 'lab');
      return o.some((x) => x.object_id === 'marker') ? o : null;
    });
    const ids = objs.map((o) => o.object_id);
    expect(ids).not.toContain('hack-page');
    expect(ids).not.toContain('hack-bus');
    expect(ids).toContain(some.object_id);
    expect(objs.find((o) => o.object_id === some.object_id).attributes.position.x).not.toBe(99);
    expect(await ed.$('[data-object-id="hack-page"]')).toBeNull();
    expect(await ed.$('[data-object-id="hack-bus"]')).toBeNull();
    viewer.end(true);
    await close(guest);
    await close(ed);
  });
});

describe('scene list', () => {
  it('lists readable scenes and creates a scene in the user namespace', async () => {
    // a public scene of its own, with one persisted object (a scene is
    // listed once it has one), so that the test runs alone too
    const ed = await mqttClient(srv, 'bot', srv.token('bot', 'public/listed', 'editor'), 'listed-bot');
    try {
      await ed.publishAsync('realm/s/public/listed/o/listed-bot/marker', JSON.stringify({
        object_id: 'marker', action: 'create', type: 'object', persist: true, data: { object_type: 'box' },
      }), { qos: 1 });
    } finally {
      ed.end(true);
    }
    const guest = await open('/');
    await guest.waitForSelector('#scene-list [data-scene="public/listed"]');
    expect(await guest.isDisabled('#new-scene button')).toBe(true);
    await close(guest);

    const bob = srv.token('bob', 'bob/home', 'editor');
    const page = await open(`/?token=${bob}`);
    await page.waitForSelector('#signed-in');
    expect(await page.textContent('#signed-in')).toContain('bob');
    await page.fill('#new-scene-name', 'garden');
    await page.click('#new-scene button');
    await page.waitForURL(/\/bob\/garden\/edit$/);
    await page.waitForSelector('a-scene[data-loaded="true"]', { state: 'attached' });
    await waitFor('editor', async () => (await page.getAttribute('#xr-who', 'data-role')) === 'editor');
    const r = await fetch(`${srv.url}/persist/!allscenes`);
    expect(await r.json()).toContain('bob/garden');
    await close(page);
  });
});

describe('scene creation', () => {
  it('a connection that drops while the scene is created fails with a message, and the user can try again', async () => {
    const bob = srv.token('bob', 'bob/home', 'editor');
    const page = await newPage();
    // The page's MQTT socket closes instead of sending its first PUBLISH
    // (the scene-options object) while window.dropPublish is set, as when
    // the network goes just then.
    await page.addInitScript(() => {
      (window as any).dropPublish = true;
      const send = WebSocket.prototype.send;
      WebSocket.prototype.send = function (this: WebSocket, d: any) {
        const b = d instanceof ArrayBuffer ? new Uint8Array(d) : ArrayBuffer.isView(d) ? new Uint8Array(d.buffer, d.byteOffset, d.byteLength) : null;
        if ((window as any).dropPublish && this.url.includes('/mqtt') && b && (b[0] & 0xf0) === 0x30) {
          (window as any).dropPublish = false;
          this.close();
          return;
        }
        send.call(this, d);
      };
    });
    await page.goto(`${srv.url}/?token=${bob}`);
    await page.waitForSelector('#signed-in');
    await page.fill('#new-scene-name', 'dropped');
    await page.click('#new-scene button');
    await waitFor('the create failed', async () => /^Could not create bob\/dropped: the connection to the server closed before it stored the scene/.test((await page.textContent('#new-scene-msg')) ?? ''), 20_000)
      .catch(async (e) => { throw new Error(`${e.message}: ${await page.textContent('#new-scene-msg')}`); });
    expect(await page.isDisabled('#new-scene button')).toBe(false);
    // Again, with the network back: the scene is made.
    await page.click('#new-scene button');
    await page.waitForURL(/\/bob\/dropped\/edit$/);
    await page.waitForSelector('a-scene[data-loaded="true"]', { state: 'attached' });
    const r = await fetch(`${srv.url}/persist/!allscenes`);
    expect(await r.json()).toContain('bob/dropped');
  });
});

describe('token refused, its answer stalled', () => {
  it('a refusal (403) whose body stalls past REQUEST_TIMEOUT_MS fails as a refusal, not as a request unanswered to retry', async () => {
    const page = await newPage();
    // The token endpoint's answer to the reconnection: 403, its body never
    // ending (Playwright's route cannot stall a body; the stream errs when
    // the request is aborted, as fetch's does).
    await page.addInitScript(() => {
      const w = window as any;
      const real = window.fetch.bind(window);
      w.refusals = 0;
      window.fetch = async (input: RequestInfo | URL, init?: RequestInit) => {
        if (!w.stallRefusal || !String(input).includes('/user/v2/mqtt_auth')) return real(input, init);
        w.refusals++;
        const body = new ReadableStream({
          start(c) { init?.signal?.addEventListener('abort', () => c.error(init!.signal!.reason)); },
        });
        return new Response(body, { status: 403, statusText: 'Forbidden', headers: { 'Content-Type': 'application/json' } });
      };
    });
    await page.goto(`${srv.url}/public/stalled?quality=low`);
    await page.waitForSelector('a-scene[data-loaded="true"]', { state: 'attached', timeout: 30_000 });
    // the page's clock is Playwright's from now, so that the 15 s pass at once
    await page.clock.install();
    await page.evaluate(() => {
      (window as any).stallRefusal = true;
      (window as any).xrealm.bus.dropForTest();
    });
    await waitFor('the token asked for again', async () => {
      await page.clock.fastForward(1_000); // (the reconnection's backoff)
      return (await page.evaluate(() => (window as any).refusals)) === 1;
    });
    await page.clock.fastForward(16_000);
    await waitFor('failed', async () => (await page.getAttribute('#xr-status', 'data-state')) === 'failed')
      .catch(async (e) => { throw new Error(`${e.message}: ${await page.textContent('#xr-status')}`); });
    expect(await page.textContent('#xr-error')).toMatch(/Access denied to public\/stalled: Forbidden/);
    await page.clock.fastForward(60_000);
    expect(await page.evaluate(() => (window as any).refusals), 'not asked again').toBe(1);
  });
});

describe('scene creation, token unanswered', () => {
  it('a token request the server never answers fails after REQUEST_TIMEOUT_MS with a message, and the user can try again', async () => {
    const bob = srv.token('bob', 'bob/home', 'editor');
    const page = await newPage();
    // the page's clock is Playwright's, so that the 15 s pass at once
    await page.clock.install();
    // the token request is held, unanswered, as by a server that hangs
    let held = 0;
    await page.route('**/user/v2/mqtt_auth', () => { held++; });
    await page.goto(`${srv.url}/?token=${bob}`);
    await page.waitForSelector('#signed-in');
    await page.fill('#new-scene-name', 'unanswered');
    await page.click('#new-scene button');
    await waitFor('the token request sent', () => held === 1);
    expect(await page.textContent('#new-scene-msg')).toBe('Creating…');
    await page.clock.fastForward(16_000);
    await waitFor('the create failed', async () => /^Could not create bob\/unanswered: the server did not answer the token request \(POST \/user\/v2\/mqtt_auth\) within 15 s/.test((await page.textContent('#new-scene-msg')) ?? ''))
      .catch(async (e) => { throw new Error(`${e.message}: ${await page.textContent('#new-scene-msg')}`); });
    expect(await page.isDisabled('#new-scene button')).toBe(false);
    // The server answers again: the scene is made.
    await page.unroute('**/user/v2/mqtt_auth');
    await page.click('#new-scene button');
    await page.waitForURL(/\/bob\/unanswered\/edit$/);
    const r = await fetch(`${srv.url}/persist/!allscenes`);
    expect(await r.json()).toContain('bob/unanswered');
  });
});

describe('sign-in', () => {
  const stored = (p: Page) => p.evaluate(() => localStorage.getItem('xrealm.token'));
  const status = (p: Page) => p.getAttribute('#xr-status', 'data-state');
  /** A token of dave's with its claims cut short, as when copied in part: two parts, not three. */
  const truncated = () => {
    const t = srv.token('dave', 'dave/den', 'editor');
    return t.slice(0, t.indexOf('.') + 20);
  };

  it('a ?token= that is not a JWT naming a user is not stored; the page says why and goes on as before', async () => {
    const garbage = await open('/public/signin?token=garbage', { width: 900 });
    expect(garbage.url()).not.toContain('token=');
    await waitFor('connected as a guest', async () => (await status(garbage)) === 'connected');
    expect(await stored(garbage)).toBeNull();
    expect(await garbage.isVisible('#xr-notice')).toBe(true);
    expect(await garbage.textContent('#xr-notice')).toMatch(/token in the address was not used: it is not a JWT.*You continue as a guest/);
    expect(await garbage.$('#xr-sign-out')).toBeNull(); // nothing stored, nothing to sign out of
    // connecting cleared the error banner, not the notice; Dismiss does
    expect(await garbage.isVisible('#xr-notice')).toBe(true);
    await garbage.click('#xr-notice button');
    expect(await garbage.isVisible('#xr-notice')).toBe(false);

    // Signed in, a bad ?token= keeps the token stored before.
    const erin = srv.token('erin', 'erin/lab', 'editor');
    await garbage.goto(`${srv.url}/public/signin?quality=low&token=${erin}`);
    await waitFor('signed in as erin', async () => (await garbage.textContent('#xr-who'))?.startsWith('erin'));
    await garbage.goto(`${srv.url}/public/signin?quality=low&token=${truncated()}`);
    await waitFor('notice', () => garbage.$('#xr-notice'));
    expect(await garbage.textContent('#xr-notice')).toMatch(/not used: it is not a JWT.*2 parts.*cut short.*still signed in as erin/);
    expect(await stored(garbage)).toBe(erin);
    await waitFor('still erin', async () => (await garbage.textContent('#xr-who'))?.startsWith('erin'));
  });

  it('the scene list does not store a pasted token that is not one, and says why', async () => {
    const page = await open('/');
    await page.waitForSelector('#sign-in');
    for (const [t, why] of [['garbage', /not stored: it is not a JWT/], [truncated(), /not stored: it is not a JWT.*2 parts/]] as const) {
      await page.fill('#token-input', t);
      await page.click('#sign-in button[type="submit"]');
      await waitFor(`refusal of ${t}`, async () => why.test((await page.textContent('#sign-in-msg')) ?? ''));
      expect(await stored(page)).toBeNull();
      expect(await page.textContent('#sign-in')).toContain('You are a guest');
    }
    // A good one is taken.
    await page.fill('#token-input', srv.token('frank', 'frank/home', 'editor'));
    await Promise.all([page.waitForEvent('load'), page.click('#sign-in button[type="submit"]')]);
    await page.waitForSelector('#signed-in');
    expect(await page.textContent('#signed-in')).toContain('frank');
  });

  it('a stored token that cannot be read (stored by hand or an older client) gets Sign out, in the viewer and the scene list', async () => {
    const page = await open('/');
    expectConsole(page, /status of 401 \(Unauthorized\) \(.*\/user\/v2\/mqtt_auth\)/);
    await page.waitForSelector('#sign-in');
    await page.evaluate(() => localStorage.setItem('xrealm.token', 'garbage'));

    // Scene list: no claim to be a guest; why it cannot be used; Sign out.
    await page.reload();
    await page.waitForSelector('#token-unreadable');
    expect(await page.textContent('#token-unreadable')).toMatch(/token is stored, but it cannot be used: it is not a JWT/);
    expect(await page.textContent('main')).not.toMatch(/guest \(anonymous/);
    expect(await page.isVisible('#token-unreadable #sign-out')).toBe(true);

    // Viewer: the server refuses it; the top bar and the banner both offer Sign out.
    await page.goto(`${srv.url}/alice/lab?quality=low`);
    await waitFor('refused', async () => (await status(page)) === 'failed');
    expect(await page.textContent('#xr-error')).toMatch(/stored sign-in token was refused \(.*malformed.*\)\. Sign out/);
    expect(await page.isVisible('#xr-error button:has-text("Sign out and continue as guest")')).toBe(true);
    expect(await page.isVisible('#xr-sign-out')).toBe(true);
    await Promise.all([page.waitForEvent('load'), page.click('#xr-sign-out')]);
    await page.waitForSelector('a-scene[data-loaded="true"]', { state: 'attached', timeout: 30_000 });
    expect(await stored(page)).toBeNull();
    expect(await status(page)).toBe('connected');
    expect(await page.$('#xr-sign-out')).toBeNull();

    // The scene list's Sign out too.
    await page.evaluate(() => localStorage.setItem('xrealm.token', 'garbage'));
    await page.goto(`${srv.url}/`);
    await Promise.all([page.waitForEvent('load'), page.click('#token-unreadable #sign-out')]);
    await page.waitForSelector('#sign-in');
    expect(await stored(page)).toBeNull();
  });

  it('the scene list says when the stored token expired, and takes a new one', async () => {
    const old = execFileSync(xrealmBin(), ['token', '--user', 'hal', '--scene', 'hal/lab', '--role', 'editor', '--data', srv.dataDir, '--ttl', '1s']).toString().trim();
    const exp = JSON.parse(Buffer.from(old.split('.')[1], 'base64url').toString()).exp * 1000;
    await waitFor('the token expired', () => Date.now() > exp + 100, 5000);
    const page = await open(`/?token=${old}`);
    await page.waitForSelector('#token-expired');
    expect(await page.textContent('#token-expired')).toMatch(/sign-in token of hal expired .*public scenes only.*cannot create scenes/);
    expect(await page.isDisabled('#new-scene button')).toBe(true);
    expect(await page.textContent('#new-scene')).toContain('Your sign-in token expired: sign in with a new one to create scenes');
    // A new token, pasted, is taken.
    await page.fill('#token-input', srv.token('hal', 'hal/lab', 'editor'));
    await Promise.all([page.waitForEvent('load'), page.click('#sign-in button[type="submit"]')]);
    await page.waitForSelector('#signed-in');
    expect(await page.$('#token-expired')).toBeNull();
    expect(await page.isDisabled('#new-scene button')).toBe(false);
  });

  it('a readable token the server refuses (its signature altered) is stored, and gets Sign out and continue as guest', async () => {
    const t = srv.token('gina', 'gina/lab', 'editor');
    const forged = t.slice(0, t.lastIndexOf('.') + 1) + 'AAAA' + t.slice(t.lastIndexOf('.') + 5);
    const page = await open(`/public/signin?token=${forged}`, { loaded: false, width: 900 });
    expectConsole(page, /status of 401 \(Unauthorized\) \(.*\/(user\/v2\/mqtt_auth|persist\/!allscenes)\)/);
    await waitFor('refused', async () => (await status(page)) === 'failed');
    // The SFU is never joined without a session: its sections say why
    // (they said "starting" for good).
    for (const sel of ['#xr-media', '#xr-pointclouds']) {
      await waitFor(`${sel} says it is not joined`, async () => /^not joined: .*refused/.test((await page.getAttribute(sel, 'data-state')) ?? ''));
    }
    expect(await stored(page)).toBe(forged);
    expect(await page.$('#xr-notice')).toBeNull();
    expect(await page.textContent('#xr-error')).toContain('stored sign-in token was refused');
    expect(await page.isVisible('#xr-error button:has-text("Sign out and continue as guest")')).toBe(true);
    expect(await page.isVisible('#xr-sign-out')).toBe(true);
    await Promise.all([page.waitForEvent('load'), page.click('#xr-error button:has-text("Sign out and continue as guest")')]);
    await waitFor('connected as a guest', async () => (await status(page)) === 'connected');
    expect(await stored(page)).toBeNull();

    // The scene list says the server refused it, lists the public scenes,
    // and offers Sign out.
    const setup = await mqttClient(srv, 'gina', t, 'gina-setup');
    await setup.publishAsync('realm/s/gina/lab/o/gina-setup/box', JSON.stringify({
      object_id: 'box', action: 'create', type: 'object', persist: true, data: { object_type: 'box' },
    }), { qos: 1 });
    await setup.endAsync();
    await page.evaluate((tok) => localStorage.setItem('xrealm.token', tok), forged);
    await page.goto(`${srv.url}/`);
    await page.waitForSelector('#token-refused');
    expect(await page.textContent('#token-refused')).toMatch(/server refused your sign-in token/);
    expect(await page.textContent('#scene-list')).not.toMatch(/Loading|Could not list/);
    await Promise.all([page.waitForEvent('load'), page.click('#token-refused-sign-out')]);
    expect(await stored(page)).toBeNull();
    expect(await page.$('#token-refused')).toBeNull();
  });
});

describe('scene names', () => {
  it('the create form takes the names the server takes (a=b), and names the character it refuses (a@b)', async () => {
    const carol = srv.token('carol', 'carol/home', 'editor');
    const page = await open(`/?token=${carol}`);
    await page.waitForSelector('#signed-in');
    // The input's pattern says the server's rule too: it matches exactly the names the form takes.
    const patternOK = (v: string) => page.$eval('#new-scene-name', (el, v) => {
      const i = el as HTMLInputElement;
      const old = i.value;
      i.value = v;
      const ok = !i.validity.patternMismatch;
      i.value = old;
      return ok;
    }, v);
    for (const [name, ok] of [['a=b', true], ['Alice_2-room=b', true], ['-', true], ['a'.repeat(65), true], ['a@b', false], ['a.b', false], ['a b', false], ['é', false], ['a+b', false]] as const) {
      expect(await patternOK(name), name).toBe(ok);
    }
    expect(await page.getAttribute('#new-scene-name', 'title')).toContain("ASCII letters, digits, '-', '_' and '='");

    // Refused: the message names the character and the allowed ones; nothing is created.
    await page.fill('#new-scene-name', 'a@b');
    await page.click('#new-scene button');
    await waitFor('refusal', async () => (await page.textContent('#new-scene-msg'))?.includes("'@' is not allowed"));
    expect(await page.textContent('#new-scene-msg')).toContain("a name may contain only ASCII letters, digits, '-', '_' and '='");
    expect(await page.getAttribute('#new-scene-name', 'aria-invalid')).toBe('true');
    expect(new URL(page.url()).pathname).toBe('/');

    // Taken: a=b is created and opens in the editor.
    await page.fill('#new-scene-name', 'a=b');
    await page.click('#new-scene button');
    await page.waitForURL(/\/carol\/a%3Db\/edit$/);
    await page.waitForSelector('a-scene[data-loaded="true"]', { state: 'attached' });
    await waitFor('editor', async () => (await page.getAttribute('#xr-who', 'data-role')) === 'editor');
    const r = await fetch(`${srv.url}/persist/!allscenes`);
    expect(await r.json()).toContain('carol/a=b');
    expect(await page.textContent('#xr-top .scene-name')).toBe('carol/a=b');
    await close(page);
  });
});

describe('screenshot', () => {
  it('shows a few objects and two avatars', async () => {
    const scene = 'showroom';
    const objs = [
      { object_id: 'floor-mat', data: { object_type: 'circle', radius: 3, rotation: { x: -90, y: 0, z: 0 }, position: { x: 0, y: 0.01, z: -4 }, material: { color: '#e9d8a6' } } },
      { object_id: 'crate', data: { object_type: 'box', position: { x: -1.6, y: 0.5, z: -4 }, material: { color: '#d62828' }, 'click-listener': true } },
      { object_id: 'globe', data: { object_type: 'sphere', radius: 0.55, position: { x: 0, y: 1.1, z: -5 }, material: { color: '#0a9396' } } },
      { object_id: 'tower', data: { object_type: 'cylinder', radius: 0.3, height: 1.6, position: { x: 1.8, y: 0.8, z: -4.5 }, material: { color: '#ee9b00' } } },
      { object_id: 'tip', data: { object_type: 'cone', parent: 'tower', radiusBottom: 0.4, height: 0.6, position: { x: 0, y: 1.1, z: 0 }, material: { color: '#9b2226' } } },
      { object_id: 'donut', data: { object_type: 'torus', radius: 0.4, radiusTubular: 0.1, position: { x: -0.2, y: 2.3, z: -4.5 }, rotation: { x: 0, y: 0.3826834, z: 0, w: 0.9238795 }, material: { color: '#005f73' } } },
      { object_id: 'title', data: { object_type: 'text', value: 'xrealm showroom', color: '#001219', width: 2.4, position: { x: 0, y: 3.1, z: -5 } } },
      { object_id: 'sun', data: { object_type: 'light', type: 'directional', intensity: 1.2, position: { x: 2, y: 4, z: 1 } } },
      { object_id: 'ambient', data: { object_type: 'light', type: 'ambient', intensity: 0.6, color: '#ffffff' } },
    ];
    const showBot = await mqttClient(srv, 'bot', srv.token('bot', `public/${scene}`, 'editor'), 'pyClient-000002');
    for (const o of objs) {
      await showBot.publishAsync(`realm/s/public/${scene}/o/pyClient-000002/${o.object_id}`, JSON.stringify({ ...o, action: 'create', type: 'object', persist: true }), { qos: 1 });
    }
    showBot.end();
    const main = await open(`/public/${scene}`, { width: 1280, height: 720, quality: 'high' });
    await placeCamera(main, 0, 1.6, 0.3);
    const others = [await open(`/public/${scene}`, { width: 320, height: 200 }), await open(`/public/${scene}`, { width: 320, height: 200 })];
    const poses = [[-2.6, 1.6, -2.2, 35], [2.3, 1.5, -2.4, -40]];
    for (let i = 0; i < 2; i++) {
      const [x, y, z, yaw] = poses[i];
      await others[i].evaluate(({ x, y, z, yaw }) => {
        const cam = document.querySelector('#xr-camera') as any;
        cam.setAttribute('position', `${x} ${y} ${z}`);
        cam.components['look-controls'].yawObject.rotation.y = (yaw * Math.PI) / 180;
      }, { x, y, z, yaw });
      const s = await session(others[i]);
      await waitFor('avatar', () => main.$(`[data-avatar-for="${s.userClient}"]`));
    }
    await main.fill('#xr-chat-input', 'Welcome to the showroom!');
    await main.press('#xr-chat-input', 'Enter');
    await main.waitForSelector('#xr-chat-log .chat-line');
    await main.waitForTimeout(1500);
    const out = join(REPO_DIR, 'web', 'test-results', 'viewer.png');
    mkdirSync(join(REPO_DIR, 'web', 'test-results'), { recursive: true });
    await main.screenshot({ path: out });
    if (process.env.XREALM_UPDATE_SCREENSHOT) {
      mkdirSync(join(REPO_DIR, 'docs', 'img'), { recursive: true });
      copyFileSync(out, join(REPO_DIR, 'docs', 'img', 'web-viewer.png'));
    }
    for (const p of [main, ...others]) await close(p);
  });
});
