// ARENA scene protocol as xrealm speaks it (docs/protocol.md): topics,
// the message envelope, validity, and the deep merge used to apply
// updates. Pure functions, no DOM: unit-tested in Node.

export type Json = null | boolean | number | string | Json[] | { [k: string]: Json };
export type JsonObject = { [k: string]: Json };

export const ACTIONS = ['create', 'update', 'delete', 'clientEvent', 'join', 'leave'] as const;
export type Action = (typeof ACTIONS)[number];

export const MSG_TYPES = ['x', 'c', 'u', 'o', 'r', 'e', 'p', 'd'] as const;
export type MsgType = (typeof MSG_TYPES)[number];

/** A parsed scene topic {realm}/s/{ns}/{scene}/{msgType}/{userClient}/{id}[/{toUid}]. */
export interface SceneTopic {
  realm: string;
  namespace: string;
  scene: string;
  msgType: MsgType;
  userClient: string;
  id: string;
  toUid?: string;
}

/** The ARENA message envelope. */
export interface Message {
  object_id: string;
  action: Action;
  type?: string;
  persist?: boolean;
  ttl?: number;
  private?: boolean;
  overwrite?: boolean;
  data?: JsonObject;
  timestamp?: string;
}

/** A stored object as GET /persist/{ns}/{scene} returns it. */
export interface StoredObject {
  object_id: string;
  type: string;
  attributes: JsonObject;
  [k: string]: unknown;
}

export class ProtocolError extends Error {}

export function isObject(v: unknown): v is JsonObject {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Parses a scene topic; throws ProtocolError naming the problem. */
export function parseTopic(topic: string): SceneTopic {
  const lv = topic.split('/');
  if (lv.length < 7 || lv.length > 8) {
    throw new ProtocolError(`topic ${JSON.stringify(topic)}: ${lv.length} levels, a scene topic has 7 or 8`);
  }
  if (lv[1] !== 's') throw new ProtocolError(`topic ${JSON.stringify(topic)}: not a scene topic`);
  if (!(MSG_TYPES as readonly string[]).includes(lv[4])) {
    throw new ProtocolError(`topic ${JSON.stringify(topic)}: unknown message type ${JSON.stringify(lv[4])}`);
  }
  for (const l of lv) {
    if (l === '') throw new ProtocolError(`topic ${JSON.stringify(topic)}: empty level`);
    if (/[+#]/.test(l)) throw new ProtocolError(`topic ${JSON.stringify(topic)}: wildcard in a level`);
  }
  const t: SceneTopic = {
    realm: lv[0], namespace: lv[2], scene: lv[3], msgType: lv[4] as MsgType, userClient: lv[5], id: lv[6],
  };
  if (lv.length === 8) t.toUid = lv[7];
  return t;
}

export function sceneBase(realm: string, ns: string, scene: string): string {
  return `${realm}/s/${ns}/${scene}`;
}

export function topicFor(base: string, msgType: MsgType, userClient: string, id: string, toUid?: string): string {
  return `${base}/${msgType}/${userClient}/${id}` + (toUid ? `/${toUid}` : '');
}

/** A name usable as a topic level and an object id: no '/', '+', '#', no spaces or control characters. */
export function validId(id: unknown): id is string {
  return typeof id === 'string' && id.length > 0 && id.length <= 200 && !/[/+#\s\u0000-\u001f]/.test(id);
}

/** Which characters a namespace or scene name may hold: topic.SceneNameChars. */
export const SCENE_NAME_CHARS = "ASCII letters, digits, '-', '_' and '='";

/**
 * The same characters as an HTML pattern attribute (which must match the
 * whole value); it agrees with sceneNameError for every non-empty name.
 */
export const SCENE_NAME_PATTERN = '[A-Za-z0-9_=\\-]+';

function sceneNameChar(c: string): boolean {
  return /^[A-Za-z0-9_=-]$/.test(c);
}

/** A character as Go's %q shows a rune: '.', ' ', '\x00', 'é'. */
function quoteChar(c: string): string {
  const n = c.codePointAt(0)!;
  const esc: Record<string, string> = { "'": "\\'", '\\': '\\\\', '\x07': '\\a', '\b': '\\b', '\f': '\\f', '\n': '\\n', '\r': '\\r', '\t': '\\t', '\v': '\\v' };
  if (esc[c]) return `'${esc[c]}'`;
  if (n < 0x20 || n === 0x7f) return `'\\x${n.toString(16).padStart(2, '0')}'`;
  return `'${c}'`;
}

/**
 * Why the server (topic.ValidSceneName) refuses name as a namespace or
 * scene name, in its words, or null when it accepts it. what names it in
 * the message ("namespace" or "scene"). A name is non-empty and made of
 * SCENE_NAME_CHARS; there is no length limit.
 */
export function sceneNameError(what: 'namespace' | 'scene', name: string): string | null {
  if (name === '') return `${what} name is empty`;
  for (const c of name) { // by code point, as Go ranges over runes
    if (sceneNameChar(c)) continue;
    let why = '';
    if (c === '+' || c === '#') why = ' (an MQTT wildcard: a name is one scene, never a pattern)';
    else if (c === '/') why = ' (it separates namespace and scene)';
    return `${what} name ${JSON.stringify(name)}: ${quoteChar(c)} is not allowed${why}; a name may contain only ${SCENE_NAME_CHARS}`;
  }
  return null;
}

/** A namespace or scene name the server accepts (topic.ValidSceneName). */
export function validSceneName(s: string): boolean {
  return sceneNameError('scene', s) === null;
}

/**
 * Checks that payload, received on topic t, is a valid ARENA message, by
 * the same rules as the server's scene.Parse: a JSON object with a known
 * action whose object_id equals the topic's id level, and typed optional
 * fields. Throws ProtocolError.
 */
export function parseMessage(t: SceneTopic | null, payload: string | Uint8Array): Message {
  const text = typeof payload === 'string' ? payload : new TextDecoder().decode(payload);
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch (e) {
    throw new ProtocolError(`malformed JSON: ${(e as Error).message}`);
  }
  return checkMessage(t, v);
}

export function checkMessage(t: SceneTopic | null, v: unknown): Message {
  if (!isObject(v)) throw new ProtocolError('not a JSON object');
  const m = v as Record<string, unknown>;
  if (typeof m.object_id !== 'string' || m.object_id === '') throw new ProtocolError('object_id missing or not a string');
  if (t && m.object_id !== t.id) {
    throw new ProtocolError(`object_id ${JSON.stringify(m.object_id)} does not equal the topic id ${JSON.stringify(t.id)}`);
  }
  if (typeof m.action !== 'string' || !(ACTIONS as readonly string[]).includes(m.action)) {
    throw new ProtocolError(`unknown action ${JSON.stringify(m.action)}`);
  }
  if (m.type != null && typeof m.type !== 'string') throw new ProtocolError('type is not a string');
  for (const k of ['persist', 'private', 'overwrite']) {
    if (m[k] != null && typeof m[k] !== 'boolean') throw new ProtocolError(`${k} is not true or false`);
  }
  if (m.ttl != null) {
    const n = typeof m.ttl === 'string' ? Number(m.ttl) : m.ttl;
    if (typeof n !== 'number' || !Number.isFinite(n) || n < 0) throw new ProtocolError('ttl is not a positive number');
    m.ttl = n;
  }
  if (m.data != null && !isObject(m.data)) throw new ProtocolError('data is not a JSON object');
  if (m.data === null) delete m.data;
  return m as unknown as Message;
}

/**
 * Applies delta to dst in place, as the server applies an update: a null
 * value removes the key; where both hold an object, they merge recursively;
 * anything else (scalars, arrays) replaces. Objects taken from delta are
 * copied without their nulls.
 */
export function merge(dst: JsonObject, delta: JsonObject): JsonObject {
  for (const [k, v] of Object.entries(delta)) {
    if (v === null) {
      delete dst[k];
    } else if (isObject(v)) {
      const cur = Object.hasOwn(dst, k) ? dst[k] : undefined;
      if (isObject(cur)) merge(cur, v);
      else put(dst, k, merge({}, v));
    } else {
      put(dst, k, Array.isArray(v) ? structuredClone(v) : v);
    }
  }
  return dst;
}

/**
 * Sets o[k] as an own data member, also for the key "__proto__", which a
 * message may hold (JSON.parse makes it an own key): assigned, it would
 * set o's prototype, and merged into, Object.prototype itself, in every
 * page of the scene.
 */
function put(o: JsonObject, k: string, v: Json) {
  if (k === '__proto__') Object.defineProperty(o, k, { value: v, writable: true, enumerable: true, configurable: true });
  else o[k] = v;
}

/** A deep copy of o without null members (what a create stores). */
export function clean(o: JsonObject): JsonObject {
  return merge({}, o);
}

/**
 * Orders objects so that every parent comes before its children. Objects
 * whose parent is missing keep their place after the others; cycles are
 * broken (and reported through the callback). It walks up each parent
 * chain in a loop, so chains of any depth take no stack.
 */
export function parentsFirst<T extends { object_id: string; parent?: string | null }>(
  objs: T[], onCycle?: (id: string) => void,
): T[] {
  const byId = new Map(objs.map((o) => [o.object_id, o]));
  const out: T[] = [];
  const state = new Map<string, 1 | 2>(); // 1 on the chain being walked, 2 done
  for (const o of objs) {
    // the chain from o up to the first ancestor done, missing, or already on it (a cycle)
    const chain: T[] = [];
    for (let x: T | undefined = o; x;) {
      const s = state.get(x.object_id);
      if (s === 2) break;
      if (s === 1) {
        onCycle?.(x.object_id);
        break;
      }
      state.set(x.object_id, 1);
      chain.push(x);
      const p: T | undefined = x.parent ? byId.get(x.parent) : undefined;
      x = p !== x ? p : undefined;
    }
    for (let i = chain.length - 1; i >= 0; i--) {
      state.set(chain[i].object_id, 2);
      out.push(chain[i]);
    }
  }
  return out;
}

/** The parent id named by an object's attributes, if any. */
export function parentOf(data: JsonObject | undefined): string | undefined {
  const p = data?.parent;
  return typeof p === 'string' && p !== '' ? p : undefined;
}

/**
 * Ids of id's descendants among objs (by data.parent), each after its
 * parent. It keeps the objects to visit in a list, so trees of any depth
 * take no stack.
 */
export function descendants(id: string, objs: Iterable<{ id: string; data: JsonObject }>): string[] {
  const children = new Map<string, string[]>();
  for (const o of objs) {
    const p = parentOf(o.data);
    if (p) (children.get(p) ?? children.set(p, []).get(p)!).push(o.id);
  }
  const out: string[] = [];
  const seen = new Set([id]);
  // depth first, each object's children in their order: the order a recursive walk has
  const todo = [...(children.get(id) ?? [])].reverse();
  while (todo.length) {
    const c = todo.pop()!;
    if (seen.has(c)) continue;
    seen.add(c);
    out.push(c);
    const kids = children.get(c);
    if (kids) for (let i = kids.length - 1; i >= 0; i--) todo.push(kids[i]);
  }
  return out;
}

/**
 * Reads an exported scene or any list of objects to import: an array of
 * stored objects ({object_id, type, attributes}) or of ARENA messages
 * ({object_id, type, data}). Returns the objects, parents first, or throws
 * ProtocolError naming the first bad entry.
 */
export function parseImport(text: string): { object_id: string; type: string; data: JsonObject }[] {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch (e) {
    throw new ProtocolError(`not JSON: ${(e as Error).message}`);
  }
  if (isObject(v) && Array.isArray(v.objects)) v = v.objects;
  if (!Array.isArray(v)) throw new ProtocolError('expected a JSON array of objects');
  const seen = new Set<string>();
  const out = v.map((e, i) => {
    if (!isObject(e)) throw new ProtocolError(`entry ${i}: not an object`);
    if (!validId(e.object_id)) throw new ProtocolError(`entry ${i}: object_id missing or not a valid id`);
    if (seen.has(e.object_id)) throw new ProtocolError(`entry ${i}: duplicate object_id ${JSON.stringify(e.object_id)}`);
    seen.add(e.object_id);
    const data = e.attributes ?? e.data;
    if (!isObject(data)) throw new ProtocolError(`entry ${i} (${e.object_id}): attributes/data is not an object`);
    if (e.type != null && typeof e.type !== 'string') throw new ProtocolError(`entry ${i} (${e.object_id}): type is not a string`);
    return { object_id: e.object_id, type: (e.type as string) || 'object', data: clean(data), parent: parentOf(data) };
  });
  return parentsFirst(out).map(({ object_id, type, data }) => ({ object_id, type, data }));
}

/**
 * Stores the objects of an import one at a time, in order, with store
 * (which resolves once the server has the object), and returns how many
 * it stored. It stops at the first that fails, with an error that says
 * how many of them were stored before it: those stay stored.
 */
export async function storeImport<T extends { object_id: string }>(objs: T[], store: (o: T) => Promise<void>): Promise<number> {
  for (const [i, o] of objs.entries()) {
    try {
      await store(o);
    } catch (e) {
      throw new Error(`stored ${i} of ${objs.length} objects; object ${o.object_id} failed: ${(e as Error)?.message ?? e}`, { cause: e });
    }
  }
  return objs.length;
}

/**
 * Checks the raw JSON of one object as the editor sends it:
 * {object_id, type, data}. Returns the parsed object or throws.
 */
export function parseObjectJSON(text: string): { object_id: string; type: string; data: JsonObject } {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch (e) {
    throw new ProtocolError(`not JSON: ${(e as Error).message}`);
  }
  if (!isObject(v)) throw new ProtocolError('expected a JSON object {"object_id", "type", "data"}');
  if (!validId(v.object_id)) throw new ProtocolError('object_id must be a non-empty string without "/", "+", "#" or spaces');
  const type = v.type ?? 'object';
  if (typeof type !== 'string') throw new ProtocolError('type must be a string');
  const data = v.data ?? v.attributes;
  if (!isObject(data)) throw new ProtocolError('data must be a JSON object');
  if (type === 'object' && typeof data.object_type !== 'string') {
    throw new ProtocolError('data.object_type must be a string (box, sphere, gltf-model, ...)');
  }
  if (data.parent != null && !validId(data.parent)) throw new ProtocolError('data.parent must be an object id');
  if (data.parent === v.object_id) throw new ProtocolError('an object cannot be its own parent');
  for (const k of ['position', 'scale']) {
    if (data[k] != null) checkVec(data[k], k, ['x', 'y', 'z']);
  }
  if (data.rotation != null) checkVec(data.rotation, 'rotation', ['x', 'y', 'z']);
  return { object_id: v.object_id, type, data };
}

function checkVec(v: Json, name: string, keys: string[]) {
  if (!isObject(v)) throw new ProtocolError(`${name} must be an object {x, y, z}`);
  for (const k of keys) {
    if (typeof v[k] !== 'number' || !Number.isFinite(v[k] as number)) {
      throw new ProtocolError(`${name}.${k} must be a number`);
    }
  }
  if (v.w != null && typeof v.w !== 'number') throw new ProtocolError(`${name}.w must be a number`);
}

/** A random id suffix of n base-36 characters. */
export function randomSuffix(n = 6): string {
  const a = new Uint8Array(n);
  crypto.getRandomValues(a);
  return Array.from(a, (b) => (b % 36).toString(36)).join('');
}

export type JWTClaims = { sub?: string; exp?: number; iat?: number; publ?: string[]; subs?: string[] };

/** One base64url part of a JWT, decoded as a JSON object, or null. */
function jwtPart(part: string): JsonObject | null {
  if (!/^[A-Za-z0-9_-]+={0,2}$/.test(part)) return null;
  try {
    const b64 = part.replace(/=+$/, '').replace(/-/g, '+').replace(/_/g, '/');
    const bin = atob(b64 + '='.repeat((4 - (b64.length % 4)) % 4));
    const json = new TextDecoder('utf-8', { fatal: true }).decode(Uint8Array.from(bin, (c) => c.charCodeAt(0)));
    const v = JSON.parse(json);
    return isObject(v) ? v : null;
  } catch {
    return null;
  }
}

/**
 * Why token cannot be a sign-in token, or null when it can: it must read as
 * a JWT (three base64url parts, the first two JSON objects) whose claims
 * name a user (a non-empty "sub"). Its signature and expiry are for the
 * server to check.
 */
export function tokenProblem(token: string): string | null {
  const t = token.trim();
  if (t === '') return 'it is empty';
  const parts = t.split('.');
  if (parts.length !== 3) {
    return `it is not a JWT, which is three base64url parts separated by ".": it has ${parts.length === 1 ? 'no "."' : `${parts.length} parts`} (cut short when copied?)`;
  }
  if (!jwtPart(parts[0])) return 'it is not a JWT: its first part (the header) is not base64url-encoded JSON (changed when copied?)';
  const c = jwtPart(parts[1]);
  if (!c) return 'it is not a JWT: its second part (the claims) is not base64url-encoded JSON (cut short or changed when copied?)';
  if (typeof c.sub !== 'string' || c.sub === '') return 'its claims name no user (no "sub")';
  if (c.exp != null && typeof c.exp !== 'number') return 'its "exp" claim is not a number';
  if (!/^[A-Za-z0-9_-]*={0,2}$/.test(parts[2])) return 'it is not a JWT: its third part (the signature) is not base64url (changed when copied?)';
  return null;
}

/** Reads the claims of a JWT without checking its signature (the server does), or null. */
export function jwtClaims(token: string): JWTClaims | null {
  const parts = token.trim().split('.');
  if (parts.length !== 3) return null;
  return jwtPart(parts[1]) as JWTClaims | null;
}
