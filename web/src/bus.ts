// The MQTT-over-WebSocket connection to xrealm: connects with a scene token
// (user name = the token's sub, password = the token), keeps a last-will
// presence message, reconnects with exponential backoff (asking for a fresh
// token each time), renews its token before the server closes the
// connection at its expiry, and reports its status.

import mqtt, { type MqttClient, type IClientOptions } from 'mqtt';
import { sceneToken, type SceneSession, AuthError, RequestTimeout } from './auth';
import { ProtocolError, jwtClaims, parseMessage, parseTopic, type Message, type SceneTopic } from './protocol';
import { capStep } from './warncap';

export type Status =
  | { state: 'connecting'; attempt: number }
  | { state: 'connected' }
  | { state: 'reconnecting'; inSeconds: number; attempt: number; reason: string }
  | { state: 'failed'; reason: string };

export interface BusHandlers {
  /**
   * Each connection (first and after every reconnect), once subscribed;
   * renewed when it replaced a connection whose token was about to expire.
   */
  onConnected(session: SceneSession, first: boolean, renewed: boolean): void | Promise<void>;
  /** A valid message on the scene. */
  onMessage(t: SceneTopic, m: Message): void;
  onStatus(s: Status): void;
  /** The connect message of this connection's presence, and its last will. */
  presence(session: SceneSession): { join: [string, Message]; will: [string, Message] };
}

const MAX_BACKOFF_S = 30;
/** Invalid messages logged in full; after them only a count at 10, 100, 1000 … */
const INVALID_WARNINGS = 5;
/** How often a connected bus looks whether its WebSocket is still open. */
const SOCKET_CHECK_MS = 250;
/** A token is renewed this long before it expires, or a fifth of its lifetime before when that is shorter. */
const RENEW_BEFORE_MS = 60_000;
/** A token that lives shorter than this is not renewed (each renewal reconnects: a storm). */
const MIN_RENEWED_LIFETIME_MS = 5_000;
/** How long a renewal waits for the old connection to close cleanly before it cuts it. */
const RENEW_CLOSE_MS = 5_000;

export class Bus {
  session: SceneSession | null = null;
  private client: MqttClient | null = null;
  /** The WebSocket under client. */
  private socket: WebSocket | null = null;
  private socketCheck: ReturnType<typeof setInterval> | undefined;
  private renewTimer: ReturnType<typeof setTimeout> | undefined;
  private attempt = 0;
  private timer: ReturnType<typeof setTimeout> | null = null;
  private stopped = false;
  private everConnected = false;
  /** Invalid messages received (for tests and the debug console). */
  invalid = 0;
  /** Messages received, valid or not (for tests). */
  received = 0;
  /**
   * The publishes of each connection not settled yet: a connection given
   * up with some in flight fails them (failInFlight), since mqtt.js does
   * not when it closes while ending cleanly.
   */
  private inFlight = new WeakMap<MqttClient, Set<(e: Error) => void>>();

  constructor(
    readonly ns: string,
    readonly scene: string,
    readonly userClient: string,
    readonly camid: string,
    private h: BusHandlers,
  ) {}

  start() {
    this.connect();
  }

  get connected(): boolean {
    return this.usable(this.client);
  }

  /**
   * Whether c can send. mqtt.js says connected until the WebSocket's close
   * event, also while the socket is closing (the server closed it and the
   * closing handshake is under way): what is sent then is dropped, with
   * nothing but Chromium's console error 'WebSocket is already in CLOSING
   * or CLOSED state', while the publish resolves.
   */
  private usable(c: MqttClient | null): c is MqttClient {
    return !!c && c === this.client && c.connected && this.socket?.readyState === WebSocket.OPEN;
  }

  /** Connects with a new token, or with renewal's, which was asked for just now. */
  private async connect(renewal?: { session: SceneSession; at: number }) {
    if (this.stopped) return;
    this.attempt++;
    this.h.onStatus({ state: 'connecting', attempt: this.attempt });
    let session: SceneSession;
    let tokenAt = renewal?.at ?? Date.now();
    try {
      session = renewal?.session ?? await sceneToken(this.ns, this.scene, this.userClient, this.camid);
      if (!renewal) tokenAt = Date.now();
    } catch (e) {
      // A refusal (403, a bad stored token) will not heal by retrying.
      if (e instanceof AuthError && (e.status === 403 || e.status === 401 || e.status === 400)) {
        this.h.onStatus({ state: 'failed', reason: e.message });
        return;
      }
      // fetch fails with a TypeError when no answer comes at all (the
      // server is down or restarting, or the network is gone); its message
      // ("Failed to fetch") says nothing to a user.
      // A request unanswered names itself.
      this.retry(e instanceof TypeError ? 'the server cannot be reached' : e instanceof RequestTimeout ? e.message : `token request failed: ${(e as Error).message}`);
      return;
    }
    if (this.stopped) return;
    this.session = session;
    const { join, will } = this.h.presence(session);
    const url = `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}/mqtt`;
    const opts: IClientOptions = {
      clientId: this.userClient,
      username: session.username,
      password: session.token,
      protocolVersion: 4,
      clean: true,
      keepalive: 20,
      reconnectPeriod: 0, // reconnection is ours: it needs a fresh token
      connectTimeout: 10_000,
      will: { topic: will[0], payload: JSON.stringify(will[1]) as unknown as Buffer, qos: 0, retain: false },
      // the socket is ours to see, so that one that is closing counts as gone (usable)
      createWebsocket: (u: string, protocols: string[]) => {
        const ws = new WebSocket(u, protocols);
        // mqtt.js writes a packet a tick after it was handed one (its
        // stream corks each packet's parts), and sends PUBACKs and PINGREQs
        // of its own: what reaches the socket once it is closing (the
        // server closed it) is dropped, as the browser would drop it, but
        // without Chromium's console error 'WebSocket is already in CLOSING
        // or CLOSED state'. Its close event follows, and the bus reconnects.
        const send = ws.send.bind(ws);
        ws.send = (data) => {
          if (ws.readyState === WebSocket.OPEN) send(data);
        };
        if (this.client === c) this.socket = ws;
        return ws;
      },
    };
    // made without connecting, so that the socket is made once this.client is c
    const c = mqtt.connect(url, { ...opts, manualConnect: true });
    this.client = c;
    let opened = false;
    c.on('connect', async () => {
      opened = true;
      this.attempt = 0;
      const base = `${session.realm}/s/${session.namespace}/${session.scene}`;
      try {
        await c.subscribeAsync(`${base}/#`, { qos: 1 });
      } catch (e) {
        if (this.client !== c) return; // gone meanwhile
        console.error('xrealm: subscribe failed', e);
        this.lost(c, 'subscribe failed');
        return;
      }
      if (!this.usable(c)) {
        this.lost(c, 'connection lost');
        return;
      }
      this.publish(join[0], join[1]).catch(() => {});
      clearInterval(this.socketCheck);
      this.socketCheck = setInterval(() => {
        if (this.client === c && !this.usable(c)) this.lost(c, 'connection lost');
      }, SOCKET_CHECK_MS);
      this.h.onStatus({ state: 'connected' });
      this.renewBeforeExpiry(c, session, tokenAt);
      const first = !this.everConnected;
      this.everConnected = true;
      await this.h.onConnected(session, first, !!renewal);
    });
    c.on('message', (topic, payload) => this.receive(topic, payload));
    c.on('error', (err) => {
      // Refused CONNECT (bad token) or a transport error; 'close' follows.
      console.warn('xrealm: MQTT error:', err.message);
    });
    c.on('close', () => this.lost(c, opened ? 'connection lost' : 'could not connect'));
    c.connect();
  }

  /** The connection c is gone, or going (its socket is closing): drops it and reconnects. */
  private lost(c: MqttClient, reason: string) {
    if (this.client !== c) return;
    this.drop(c);
    c.end(true); // (which fails its publishes in flight)
    this.failInFlight(c, reason);
    this.retry(reason);
  }

  /** Forgets c as the connection. */
  private drop(c: MqttClient) {
    this.client = null;
    this.socket = null;
    clearInterval(this.socketCheck);
    clearTimeout(this.renewTimer);
    c.removeAllListeners('message');
  }

  /**
   * The server closes a connection when its token expires (the others
   * then get its last will: it left, and came back with the reconnection).
   * Shortly before, a new token is asked for, and the connection is
   * replaced: closed with a DISCONNECT, so that no will is sent, and made
   * again with the new token. The token's lifetime is its exp less its iat,
   * counted from when it arrived, so that a clock that is off does not
   * matter.
   */
  private renewBeforeExpiry(c: MqttClient, session: SceneSession, tokenAt: number) {
    const claims = jwtClaims(session.token);
    if (typeof claims?.exp !== 'number') return;
    const lifetime = typeof claims.iat === 'number' ? (claims.exp - claims.iat) * 1000 : claims.exp * 1000 - tokenAt;
    // (a server whose tokens live a second, or a clock far ahead: the
    // connection ends when the token expires, and reconnects with backoff)
    if (!(lifetime >= MIN_RENEWED_LIFETIME_MS)) return;
    const at = tokenAt + lifetime - Math.min(RENEW_BEFORE_MS, lifetime / 5);
    clearTimeout(this.renewTimer);
    this.renewTimer = setTimeout(() => this.renew(c, claims.exp as number), Math.min(2 ** 31 - 1, Math.max(0, at - Date.now())));
  }

  /** Replaces c, whose token expires at exp (seconds), with a connection on a new token. */
  private async renew(c: MqttClient, exp: number) {
    if (this.client !== c || this.stopped) return;
    let session: SceneSession;
    try {
      session = await sceneToken(this.ns, this.scene, this.userClient, this.camid);
    } catch (e) {
      // the connection goes on until its token expires; then it reconnects as after any loss
      console.info(`xrealm: the token was not renewed (${(e as Error).message}); the connection ends when it expires`);
      return;
    }
    const at = Date.now();
    if (this.client !== c || this.stopped) return;
    // The server caps a scene token's expiry at the sign-in token's: near
    // the sign-in's end a new token expires when this one does, and
    // reconnecting with it (the scene loaded again, messages lost) gains
    // nothing. The connection goes on until then, renewed no more.
    const renewedExp = jwtClaims(session.token)?.exp;
    if (typeof renewedExp === 'number' && renewedExp <= exp) {
      console.info('xrealm: the renewed token expires no later than the current one (the sign-in token ends then); the connection ends when it expires');
      return;
    }
    this.drop(c);
    // Once the server has the DISCONNECT: a new connection with the same
    // client id before would take over this one, which then sends its
    // will. mqtt.js's end(false) waits for the acknowledgements of QoS 1
    // publishes in flight, and never calls back when the socket closes
    // first (the server closes a connection whose publish it could not
    // store): the socket's close also goes on, and after RENEW_CLOSE_MS
    // the socket is cut (the will then fires, as after a loss).
    let next = false;
    const reconnect = () => {
      if (next) return;
      next = true;
      clearTimeout(cut);
      // (after a clean end none is left; after a close or the cut, their
      // acknowledgements will not come: the server may not have them)
      this.failInFlight(c, 'the connection was replaced (token renewal) before the server confirmed it; it may not be stored');
      if (!this.stopped) this.connect({ session, at });
    };
    const cut = setTimeout(() => {
      (c as unknown as { stream?: { destroy(): void } }).stream?.destroy();
      reconnect();
    }, RENEW_CLOSE_MS);
    c.once('close', reconnect);
    c.end(false, {}, reconnect);
  }

  private retry(reason: string) {
    if (this.stopped || this.timer) return;
    const base = Math.min(MAX_BACKOFF_S, 2 ** Math.min(this.attempt, 6) / 2);
    const delay = base * (0.75 + Math.random() * 0.5);
    this.h.onStatus({ state: 'reconnecting', inSeconds: Math.round(delay), attempt: this.attempt, reason });
    this.timer = setTimeout(() => {
      this.timer = null;
      this.connect();
    }, delay * 1000);
  }

  /** Drops the connection as a network failure would (no DISCONNECT, so the will fires). */
  dropForTest() {
    (this.client as unknown as { stream?: { destroy(): void } })?.stream?.destroy();
  }

  /**
   * Starts closing the WebSocket, as the browser does when the server
   * closes it: the socket is closing until the closing handshake ends,
   * while mqtt.js still says connected.
   */
  closeSocketForTest() {
    this.socket?.close();
  }

  private receive(topic: string, payload: Uint8Array) {
    this.received++;
    let t: SceneTopic, m: Message;
    try {
      t = parseTopic(topic);
      m = parseMessage(t, payload);
    } catch (e) {
      if (!(e instanceof ProtocolError)) throw e;
      this.invalid++;
      const text = new TextDecoder().decode(payload.slice(0, 200));
      this.warnInvalid(`xrealm: ignored an invalid message on ${topic}: ${e.message}; payload ${JSON.stringify(text)}`);
      return;
    }
    // Messages addressed to another client are not ours.
    if (t.toUid && t.toUid !== this.userClient && t.toUid !== this.camid) return;
    try {
      this.h.onMessage(t, m);
    } catch (e) {
      this.notApplied(topic, e);
    }
  }

  /** A message (its topic, or its object id) that could not be applied was dropped: counted and logged as invalid. */
  notApplied(where: string, e: unknown) {
    this.invalid++;
    this.warnInvalid(`xrealm: a message on ${where} could not be applied:`, e);
  }

  /**
   * Logs the invalid message this.invalid counts: the first
   * INVALID_WARNINGS in full, then one line at each power of ten (10, 100,
   * 1000 …) with the count and the last one, so that a client sending
   * invalid messages by the thousand does not flood the console.
   */
  private warnInvalid(what: string, err?: unknown) {
    const n = this.invalid;
    const step = capStep(n, INVALID_WARNINGS);
    if (step === 'full' || step === 'last') {
      const more = step === 'last' ? ' (more are counted in xrealm.bus.invalid, and logged at 10, 100, 1000 … of them)' : '';
      if (err === undefined) console.warn(what + more);
      else console.warn(what + more, err);
    } else if (step === 'count') {
      console.warn(`xrealm: ${n} invalid messages ignored so far; the last: ${what}${err === undefined ? '' : ` ${err}`}`);
    }
  }

  /** Publishes a message; QoS 1 for persisted object messages. Resolves once sent (QoS 1: acknowledged). */
  publish(topic: string, m: Message, qos: 0 | 1 = m.persist ? 1 : 0): Promise<void> {
    const c = this.client;
    if (!this.usable(c)) {
      // the socket is closing: the connection is gone, say so now
      if (c) this.lost(c, 'connection lost');
      return Promise.reject(new Error('not connected'));
    }
    const payload = JSON.stringify({ ...m, timestamp: new Date().toISOString() });
    let pending = this.inFlight.get(c);
    if (!pending) this.inFlight.set(c, (pending = new Set()));
    const set = pending;
    return new Promise<void>((resolve, reject) => {
      const fail = (e: Error) => {
        set.delete(fail);
        reject(e);
      };
      set.add(fail);
      c.publishAsync(topic, payload, { qos }).then(() => {
        set.delete(fail);
        resolve();
      }, fail);
    });
  }

  /** Fails the publishes of c still in flight with why. */
  private failInFlight(c: MqttClient, why: string) {
    const pending = this.inFlight.get(c);
    this.inFlight.delete(c);
    for (const fail of pending ?? []) fail(new Error(why));
  }

  /** Leaves: sends the leave message (the will would say the same) and disconnects. */
  stop(leave?: [string, Message]) {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    clearInterval(this.socketCheck);
    clearTimeout(this.renewTimer);
    const c = this.client;
    const usable = this.usable(c);
    this.client = null;
    this.socket = null;
    if (usable && leave) {
      c.publish(leave[0], JSON.stringify(leave[1]), { qos: 0 });
    }
    c?.end(false);
  }
}
