// Tokens. A user signs in by opening any page with ?token=<token>, a token
// from `xrealm token --user NAME ...` (or another issuer the server
// trusts). The page keeps it in localStorage ("xrealm.token") and removes
// it from the address bar. For each scene, the client asks the token
// endpoint for a scene token, sending the stored token as a Bearer header;
// the server answers with a token whose role (editor or viewer) follows the
// scene's settings for that user. Without a stored token the user is an
// anonymous viewer. ?signout (or the Sign out button) forgets the token.
// A token that does not read as a JWT naming a user (tokenProblem) is not
// stored, and the page says why; a stored token the server refuses (expired,
// signed by another key, or unreadable: stored by an older client or by
// hand) gets a Sign out button wherever it is used.

import { jwtClaims, randomSuffix, tokenProblem } from './protocol';

const TOKEN_KEY = 'xrealm.token';
const NAME_KEY = 'xrealm.displayName';

export interface Defaults {
  realm: string;
  persistPath: string;
  mqttPath: string[];
  camHeight: number;
}

export interface SceneSession {
  realm: string;
  namespace: string;
  scene: string;
  username: string; // the token's sub: MQTT user name
  token: string;
  role: 'editor' | 'viewer';
  userClient: string;
  camid: string;
  displayName: string;
  signedIn: boolean;
}

export class AuthError extends Error {
  constructor(message: string, readonly status: number) {
    super(message);
  }
}

let addressNotice: string | null = null;

/**
 * Takes ?token= and ?signout from the address, then returns the stored
 * token. A ?token= that is not a sign-in token is not stored; addressTokenNotice
 * then says why.
 */
export function identityToken(): string | null {
  const url = new URL(location.href);
  let changed = false;
  if (url.searchParams.has('signout')) {
    signOut();
    url.searchParams.delete('signout');
    changed = true;
  }
  const t = url.searchParams.get('token');
  if (t !== null) {
    if (t.trim()) {
      const problem = signIn(t);
      if (problem) {
        const me = identity();
        addressNotice = `The token in the address was not used: ${problem}. ` +
          (me ? `You are still signed in as ${me.user}.` : storedToken() ? 'The token stored before is kept.' : 'You continue as a guest.');
      }
    } else signOut();
    url.searchParams.delete('token');
    changed = true;
  }
  if (changed) history.replaceState(null, '', url.pathname + url.search + url.hash);
  return storedToken();
}

/** Why the ?token= of this page's address was not stored, or null. */
export function addressTokenNotice(): string | null {
  return addressNotice;
}

/**
 * Stores t as the sign-in token if it reads as one (tokenProblem), and
 * returns null; else stores nothing and returns why not.
 */
export function signIn(t: string): string | null {
  const problem = tokenProblem(t);
  if (!problem) localStorage.setItem(TOKEN_KEY, t.trim());
  return problem;
}

export function signOut() {
  localStorage.removeItem(TOKEN_KEY);
}

/** The stored token, readable or not, or null. Token requests send it. */
export function storedToken(): string | null {
  return localStorage.getItem(TOKEN_KEY) || null;
}

/** Why the stored token is not a sign-in token, or null (also when none is stored). */
export function storedTokenProblem(): string | null {
  const t = storedToken();
  return t ? tokenProblem(t) : null;
}

/**
 * The signed-in user's name, from the stored token, or null when no token
 * is stored or it does not read as a sign-in token (see storedToken).
 */
export function identity(): { user: string; expires: Date | null; expired: boolean } | null {
  const t = storedToken();
  if (!t || tokenProblem(t)) return null;
  const c = jwtClaims(t);
  if (!c?.sub) return null;
  const expires = c.exp ? new Date(c.exp * 1000) : null;
  return { user: c.sub, expires, expired: !!expires && expires.getTime() < Date.now() };
}

export function displayName(): string {
  let n = localStorage.getItem(NAME_KEY);
  if (!n) {
    n = `Guest-${randomSuffix(4)}`;
    localStorage.setItem(NAME_KEY, n);
  }
  return n;
}

export function setDisplayName(n: string) {
  localStorage.setItem(NAME_KEY, n.slice(0, 40));
}

/**
 * How long a request to the server may go unanswered: the token and the
 * defaults, their bodies included (they are small), and the stored objects
 * until their answer starts (a big scene may take longer to arrive). A
 * server that never answers left the page saying "Creating…" or
 * "connecting" for ever.
 */
export const REQUEST_TIMEOUT_MS = 15_000;

/**
 * fetch, failing with an Error that names the request (what, such as
 * 'POST /user/v2/mqtt_auth') when neither fetch nor read has finished
 * within REQUEST_TIMEOUT_MS. read takes the answer (its body included,
 * or not) within that time too. The timer is a setTimeout.
 */
/** A request that fetchWithin gave up on: its message names it and says so. */
export class RequestTimeout extends Error {}

async function fetchWithin<T>(what: string, url: string, init: RequestInit, read: (res: Response) => Promise<T>): Promise<T> {
  const ac = new AbortController();
  const timer = setTimeout(() => ac.abort(), REQUEST_TIMEOUT_MS);
  try {
    return await read(await fetch(url, { ...init, signal: ac.signal }));
  } catch (e) {
    // (a refusal whose body stalled is still a refusal: it is not retried)
    if (ac.signal.aborted && !(e instanceof AuthError)) throw new RequestTimeout(`the server did not answer the ${what} within ${REQUEST_TIMEOUT_MS / 1000} s`);
    throw e;
  } finally {
    clearTimeout(timer);
  }
}

let defaultsCache: Promise<Defaults> | null = null;

/** GET /conf/defaults.json. */
export function defaults(): Promise<Defaults> {
  defaultsCache ??= (async () => {
    const j = await fetchWithin('request for its settings (GET /conf/defaults.json)', '/conf/defaults.json', { credentials: 'omit' }, async (res) => {
      if (!res.ok) throw new Error(`GET /conf/defaults.json: HTTP ${res.status}`);
      return res.json();
    });
    const d = j?.ARENADefaults ?? {};
    return {
      realm: typeof d.realm === 'string' ? d.realm : 'realm',
      persistPath: typeof d.persistPath === 'string' ? d.persistPath : '/persist/',
      mqttPath: Array.isArray(d.mqttPath) ? d.mqttPath : ['/mqtt/'],
      camHeight: typeof d.camHeight === 'number' ? d.camHeight : 1.6,
    };
  })();
  defaultsCache.catch(() => (defaultsCache = null));
  return defaultsCache;
}

async function errorText(res: Response): Promise<string> {
  try {
    const j = await res.json();
    if (typeof j?.error === 'string') return j.error;
  } catch {
    /* not JSON */
  }
  return res.statusText || `HTTP ${res.status}`;
}

/**
 * Asks POST /user/v2/mqtt_auth for a token for one scene. userClient is
 * kept across reconnections so that rights tied to it stay valid.
 */
export async function sceneToken(ns: string, scene: string, userClient: string, camid: string): Promise<SceneSession> {
  const d = await defaults();
  const id = storedToken();
  const name = displayName();
  const form = new URLSearchParams({
    username: name,
    id_auth: id ? 'jwt' : 'anonymous',
    realm: d.realm,
    scene: `${ns}/${scene}`,
    userclient: userClient,
    camid,
  });
  const headers: Record<string, string> = { 'Content-Type': 'application/x-www-form-urlencoded' };
  if (id) headers.Authorization = `Bearer ${id}`;
  const j = await fetchWithin('token request (POST /user/v2/mqtt_auth)', '/user/v2/mqtt_auth', { method: 'POST', body: form, headers, credentials: 'same-origin' }, async (res) => {
    if (!res.ok) {
      const why = await errorText(res);
      if (res.status === 401 && id) {
        throw new AuthError(`Your stored sign-in token was refused (${why}). Sign out to continue as a guest, or open the page with ?token=<a new token>.`, 401);
      }
      if (res.status === 403) throw new AuthError(`Access denied to ${ns}/${scene}: ${why}`, 403);
      throw new AuthError(`Token request failed (HTTP ${res.status}): ${why}`, res.status);
    }
    return res.json();
  });
  if (typeof j?.token !== 'string' || typeof j?.username !== 'string') {
    throw new AuthError('Token endpoint answered without a token', 500);
  }
  return {
    realm: d.realm, namespace: ns, scene,
    username: j.username, token: j.token,
    role: j.role === 'editor' ? 'editor' : 'viewer',
    userClient, camid,
    displayName: id ? (jwtClaims(id)?.sub ?? name) : name,
    signedIn: !!id && !String(j.username).startsWith('anonymous-'),
  };
}

/** GET under /persist/ with an explicit token (or none), never the cookie. */
export async function persistGet<T>(path: string, token: string | null): Promise<T> {
  const d = await defaults();
  const headers: Record<string, string> = {};
  if (token) headers.Authorization = `Bearer ${token}`;
  const url = d.persistPath.replace(/\/?$/, '/') + path;
  const res = await fetchWithin(`request GET ${url}`, url, { headers, credentials: 'omit', cache: 'no-store' }, async (res) => {
    if (!res.ok) throw new AuthError(`GET ${d.persistPath}${path}: ${await errorText(res)}`, res.status);
    return res;
  });
  return res.json() as Promise<T>;
}
