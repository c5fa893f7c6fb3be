// Test harness: Debian's Chromium (installed when missing), a real
// `xrealm serve` on free loopback ports with a temporary data directory, and
// helpers for tokens and Node MQTT clients.

import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import mqtt, { type MqttClient } from 'mqtt';
import { chromium, type Browser, type Page } from 'playwright-core';

export const WEB_DIR = resolve(dirname(fileURLToPath(import.meta.url)), '..');
export const REPO_DIR = resolve(WEB_DIR, '..');
export const CHROMIUM = process.env.CHROMIUM_PATH || '/usr/bin/chromium';

/** Installs Debian's chromium package when the browser is missing (needs root). */
export function ensureChromium() {
  if (existsSync(CHROMIUM)) return;
  if (process.getuid?.() !== 0) {
    throw new Error(`${CHROMIUM} is missing; install Debian's chromium package (apt-get install chromium) or set CHROMIUM_PATH`);
  }
  console.log('[web tests] installing chromium with apt-get (once)…');
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  try {
    execFileSync('apt-get', ['update', '-q'], { stdio: 'ignore', env });
  } catch {
    console.log('[web tests] apt-get update failed; trying the install with the package lists at hand');
  }
  execFileSync('apt-get', ['install', '-y', '-q', 'chromium'], { stdio: ['ignore', 'ignore', 'inherit'], env });
  if (!existsSync(CHROMIUM)) throw new Error(`apt-get install chromium did not provide ${CHROMIUM}`);
}

export function xrealmBin(): string {
  const bin = process.env.XREALM_BIN || join(REPO_DIR, 'bin', 'xrealm');
  if (!existsSync(bin)) throw new Error(`xrealm binary not found at ${bin}: run scripts/setup.sh or set XREALM_BIN`);
  return bin;
}

export async function freePort(): Promise<number> {
  return new Promise((res, rej) => {
    const s = createServer();
    s.unref();
    s.on('error', rej);
    s.listen(0, '127.0.0.1', () => {
      const a = s.address();
      s.close(() => (typeof a === 'object' && a ? res(a.port) : rej(new Error('no port'))));
    });
  });
}

export interface XrealmServer {
  url: string; // http://127.0.0.1:PORT
  mqttURL: string; // mqtt://127.0.0.1:PORT
  natsURL: string; // nats://127.0.0.1:PORT with { nats: true }, else ''
  dataDir: string;
  token(user: string, scene: string, role: 'editor' | 'viewer'): string;
  /** A bus token with the SFU's rights (xrealm token --role sfu), for Go SFU clients. */
  sfuToken(user: string): string;
  log(): string;
  /** Stops the server as a crash or a restart would, keeping its data directory and ports. */
  down(): Promise<void>;
  /** Starts it again after down, on the same ports with the same data, and waits until it answers. */
  up(): Promise<void>;
  stop(): Promise<void>;
}

/**
 * Starts `xrealm serve` and waits until it answers. With nats, its NATS
 * listener is on too (Go SFU clients join over the bus); args are more
 * flags of serve (such as --token-ttl).
 */
export async function startServer(opts: { nats?: boolean; args?: string[] } = {}): Promise<XrealmServer> {
  const bin = xrealmBin();
  const dist = join(WEB_DIR, 'dist');
  if (!existsSync(join(dist, 'index.html'))) throw new Error(`web client not built (${dist}): run npm run build`);
  const dataDir = mkdtempSync(join(tmpdir(), 'xrealm-web-test-'));
  let http = 0, mq = 0, nats = 0, args: string[] = [], url = '';
  /** Picks free ports for the listeners (again after one was taken meanwhile). */
  const pickPorts = async () => {
    [http, mq, nats] = [await freePort(), await freePort(), opts.nats ? await freePort() : 0];
    args = ['serve', '--data', dataDir, '--http-addr', `127.0.0.1:${http}`, '--mqtt-addr', `127.0.0.1:${mq}`,
      '--https-addr', '', '--mqtts-addr', '', '--nats-addr', nats ? `127.0.0.1:${nats}` : '', '--nats-ws-addr', '', '--mqtt-ws-addr', '', '--ubiq-addr', '', '--ubiq-wss-addr', '',
      '--name', 'webtest', '--log-level', 'info', ...(opts.args ?? [])];
    url = `http://127.0.0.1:${http}`;
  };
  let proc!: ChildProcess;
  let out = '';
  let exited = false;
  /** Starts the process on the ports above and waits until it answers. */
  const launch = async () => {
    proc = spawn(bin, args, { env: { ...process.env, XREALM_WEB_DIR: dist }, stdio: ['ignore', 'pipe', 'pipe'] });
    exited = false;
    proc.stdout!.on('data', (b) => (out += b));
    proc.stderr!.on('data', (b) => (out += b));
    const me = proc;
    me.on('exit', () => { if (proc === me) exited = true; });
    const deadline = Date.now() + 30_000;
    for (;;) {
      if (exited) throw new Error(`xrealm serve exited:\n${out}`);
      try {
        const r = await fetch(`${url}/healthz`);
        if (r.ok) break;
      } catch {
        /* not yet */
      }
      if (Date.now() > deadline) {
        proc.kill('SIGKILL');
        throw new Error(`xrealm serve did not answer within 30 s:\n${out}`);
      }
      await new Promise((r) => setTimeout(r, 100));
    }
  };
  /** Ends the process (SIGTERM, then SIGKILL after 10 s) and waits until it has exited. */
  const kill = async () => {
    if (exited) return;
    const me = proc;
    await new Promise<void>((r) => {
      const t = setTimeout(() => { me.kill('SIGKILL'); }, 10_000);
      me.on('exit', () => { clearTimeout(t); r(); });
      me.kill('SIGTERM');
    });
    exited = true;
  };
  // A port found free can be taken before the server binds it (by another
  // test file's server, or as the local port of any outgoing connection):
  // then the server exits at once, and it is started again on other ports.
  for (let attempt = 1; ; attempt++) {
    await pickPorts();
    try {
      await launch();
      break;
    } catch (e) {
      if (attempt >= 5 || !/address already in use/.test(String(e))) throw e;
      out = '';
    }
  }
  const root = await fetch(`${url}/`);
  if (!root.ok || !(await root.text()).includes('/assets/')) {
    await kill();
    throw new Error(`xrealm serve does not serve the web client at / (HTTP ${root.status}); is webclient mounted in server/server.go?`);
  }
  return {
    url,
    mqttURL: `mqtt://127.0.0.1:${mq}`,
    natsURL: nats ? `nats://127.0.0.1:${nats}` : '',
    dataDir,
    token: (user, scene, role) =>
      execFileSync(bin, ['token', '--user', user, '--scene', scene, '--role', role, '--data', dataDir, '--ttl', '2h']).toString().trim(),
    sfuToken: (user) => execFileSync(bin, ['token', '--user', user, '--role', 'sfu', '--data', dataDir, '--ttl', '2h']).toString().trim(),
    log: () => out,
    down: kill,
    up: launch,
    stop: async () => {
      await kill();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

export const CHROMIUM_ARGS = [
  '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
  '--disable-component-update', '--disable-sync',
  // WebGL without a GPU: SwiftShader, which newer Chromium only uses when asked.
  '--use-angle=swiftshader', '--enable-unsafe-swiftshader',
  // Several pages at once must all keep rendering.
  '--disable-background-timer-throttling', '--disable-renderer-backgrounding', '--disable-backgrounding-occluded-windows',
];

export async function launchBrowser(): Promise<Browser> {
  ensureChromium();
  return chromium.launch({ executablePath: CHROMIUM, headless: true, args: CHROMIUM_ARGS });
}

/**
 * Chromium for pages that use WebRTC with a server on this machine: loopback
 * candidates, no mDNS names. With media, getUserMedia gets Chromium's fake
 * camera (a test pattern) and microphone (a beep) without asking, and audio
 * plays without a click.
 */
export async function launchRTCBrowser(opts: { media?: boolean } = {}): Promise<Browser> {
  ensureChromium();
  const media = opts.media ? ['--use-fake-device-for-media-stream', '--use-fake-ui-for-media-stream', '--autoplay-policy=no-user-gesture-required'] : [];
  return chromium.launch({ executablePath: CHROMIUM, headless: true,
    args: [...CHROMIUM_ARGS, '--allow-loopback-in-peer-connection', '--disable-features=WebRtcHideLocalIpsWithMdns', ...media] });
}

/** A Node MQTT client (the "third client"), connected with a token. */
export async function mqttClient(srv: XrealmServer, user: string, token: string, clientId: string): Promise<MqttClient> {
  const c = mqtt.connect(srv.mqttURL, { clientId, username: user, password: token, reconnectPeriod: 0, connectTimeout: 10_000 });
  await new Promise<void>((res, rej) => {
    c.once('connect', () => res());
    c.once('error', rej);
  });
  return c;
}

export async function waitFor<T>(what: string, f: () => Promise<T | undefined | null | false> | T | undefined | null | false, timeoutMs = 15_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await f();
      if (v) return v;
    } catch (e) {
      last = e;
    }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}${last ? `: ${last}` : ''}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/**
 * What a toggle button (Panel, Editor, Microphone, Camera, Publish) shows
 * before its label: its ::before content, a hollow dot while off and a
 * filled one while pressed, so that the state shows without colour.
 */
export const toggleMark = async (p: Page, selector: string): Promise<string> => {
  // the computed content is quoted, with its alternative text: "●" / ""
  const content = await p.$eval(selector, (el) => getComputedStyle(el, '::before').content);
  return /^"([^"]*)"/.exec(content)?.[1] ?? content;
};
export const MARK_OFF = '\u25cb';
export const MARK_ON = '\u25cf';

/** A third-party client: Eclipse paho-mqtt in Python (web/test/pypub.py), from the repository's .venv. */
export interface PythonPublisher {
  publishAsync(topic: string, payload: string, opts: { qos: 0 | 1 }): Promise<void>;
  end(): void;
}

/**
 * Starts web/test/pypub.py with the repository's .venv (made by
 * ./scripts/test.sh), connected as user with token, and resolves once it is
 * connected. Each publish resolves when the broker has the message.
 */
export async function pythonPublisher(srv: XrealmServer, user: string, token: string, clientId: string): Promise<PythonPublisher> {
  const py = join(REPO_DIR, '.venv', 'bin', 'python');
  if (!existsSync(py)) throw new Error(`${py} is missing: run ./scripts/test.sh once, which makes the .venv with paho-mqtt`);
  const port = new URL(srv.mqttURL).port;
  const proc = spawn(py, [join(WEB_DIR, 'test', 'pypub.py'), '127.0.0.1', port, clientId, user, token], { stdio: ['pipe', 'pipe', 'pipe'] });
  let err = '';
  proc.stderr!.on('data', (d) => (err += d));
  const waiting: ((line: string) => void)[] = [];
  let buf = '';
  proc.stdout!.on('data', (d) => {
    buf += d;
    for (let i = buf.indexOf('\n'); i >= 0; i = buf.indexOf('\n')) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      waiting.shift()?.(line);
    }
  });
  const next = () => new Promise<string>((res, rej) => {
    const t = setTimeout(() => rej(new Error(`pypub.py did not answer within 15 s; stderr:\n${err}`)), 15_000);
    waiting.push((line) => { clearTimeout(t); res(line); });
  });
  const ready = await next();
  if (ready !== 'ready') throw new Error(`pypub.py: ${ready}\n${err}`);
  let chain = Promise.resolve();
  return {
    publishAsync(topic, payload, { qos }) {
      // one message at a time, in order: each answer belongs to the oldest request
      const p = chain.then(async () => {
        const answer = next();
        proc.stdin!.write(JSON.stringify({ topic, payload, qos }) + '\n');
        const a = await answer;
        if (a !== 'ok') throw new Error(`pypub.py: ${a}`);
      });
      chain = p.catch(() => {});
      return p;
    },
    end() {
      proc.stdin!.end();
      proc.kill();
    },
  };
}

/**
 * Pixels that change when the scene's object named name (a layer such as
 * xr-pointclouds or xr-media) is hidden, rendered into the page's own
 * WebGL buffer.
 */
export function layerPixels(p: Page, name: string): Promise<number> {
  return p.evaluate((name) => {
    const sc = document.querySelector('a-scene') as any;
    const r = sc.renderer, gl = r.getContext();
    const root = sc.object3D.getObjectByName(name);
    const snap = () => {
      r.render(sc.object3D, sc.camera);
      const px = new Uint8Array(gl.drawingBufferWidth * gl.drawingBufferHeight * 4);
      gl.readPixels(0, 0, gl.drawingBufferWidth, gl.drawingBufferHeight, gl.RGBA, gl.UNSIGNED_BYTE, px);
      return px;
    };
    root.visible = false;
    const a = snap();
    root.visible = true;
    const b = snap();
    let n = 0;
    for (let i = 0; i < a.length; i += 4) if (Math.abs(a[i] - b[i]) + Math.abs(a[i + 1] - b[i + 1]) + Math.abs(a[i + 2] - b[i + 2]) > 30) n++;
    return n;
  }, name);
}
