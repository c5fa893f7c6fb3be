// The scene's objects: a model that applies create/update/delete by the
// server's rules, and a renderer that keeps one A-Frame entity per object.

import { AFRAME, THREE } from './aframe';
import {
  clean, descendants, isObject, merge, parentOf, parentsFirst,
  type Json, type JsonObject, type Message, type StoredObject,
} from './protocol';
import { ParentWaits } from './waiting';
import { capStep } from './warncap';

export interface SceneObject {
  id: string;
  type: string;
  data: JsonObject;
}

export type ModelEvent = { kind: 'set'; obj: SceneObject; prev?: SceneObject } | { kind: 'delete'; id: string } | { kind: 'reset' };

/** Objects of one scene, changed by bus messages with the server's rules. */
export class SceneModel {
  readonly objects = new Map<string, SceneObject>();
  private listeners: ((e: ModelEvent) => void)[] = [];

  on(f: (e: ModelEvent) => void) {
    this.listeners.push(f);
  }

  private emit(e: ModelEvent) {
    for (const f of this.listeners) f(e);
  }

  /**
   * Applies an object message: create replaces (upsert); update merges
   * (null removes a key) or, with overwrite, replaces; an update of an
   * unknown object is ignored, as the server ignores it; delete removes the
   * object and its descendants. Other actions do nothing here.
   */
  apply(m: Message) {
    switch (m.action) {
      case 'create':
        this.set({ id: m.object_id, type: m.type || 'object', data: clean(m.data ?? {}) });
        break;
      case 'update': {
        const cur = this.objects.get(m.object_id);
        if (!cur) {
          console.debug(`xrealm: update of unknown object ${m.object_id} ignored`);
          return;
        }
        const next: SceneObject = m.overwrite
          ? { id: cur.id, type: m.type || cur.type, data: clean(m.data ?? {}) }
          : { id: cur.id, type: cur.type, data: merge(structuredClone(cur.data), m.data ?? {}) };
        this.set(next, cur);
        break;
      }
      case 'delete':
        this.delete(m.object_id);
        break;
    }
  }

  private set(obj: SceneObject, prev = this.objects.get(obj.id)) {
    if (parentOf(obj.data) === obj.id) delete obj.data.parent;
    this.objects.set(obj.id, obj);
    this.emit({ kind: 'set', obj, prev });
  }

  delete(id: string) {
    if (!this.objects.has(id)) return;
    const all = [id, ...descendants(id, this.objects.values())];
    for (const x of all.reverse()) {
      this.objects.delete(x);
      this.emit({ kind: 'delete', id: x });
    }
  }

  /** Replaces the whole state with a persisted snapshot, parents first. */
  load(stored: StoredObject[]) {
    // (a set: a search of the list for each object was quadratic in the
    // scene's size, at every load after a reconnection or renewal)
    const kept = new Set(stored.map((s) => s?.object_id));
    for (const id of [...this.objects.keys()]) {
      if (!kept.has(id)) this.delete(id);
    }
    const list = parentsFirst(
      stored
        .filter((s) => typeof s?.object_id === 'string' && isObject(s.attributes))
        .map((s) => ({ object_id: s.object_id, type: s.type || 'object', data: s.attributes, parent: parentOf(s.attributes) })),
      (id) => console.warn(`xrealm: parent cycle through ${id}`),
    );
    for (const s of list) {
      const cur = this.objects.get(s.object_id);
      let obj: SceneObject;
      try {
        obj = { id: s.object_id, type: s.type, data: clean(s.data) };
        if (cur && JSON.stringify(cur.data) === JSON.stringify(obj.data) && cur.type === obj.type) continue;
      } catch (e) {
        // data the page cannot copy (nested deeper than its stack: the
        // server stores up to 10,000 levels) leaves this object out, not
        // the whole scene; one on the page already (in kept) leaves it,
        // as it is left out of the other pages
        console.warn(`xrealm: object ${s.object_id} of the stored scene could not be taken: ${(e as Error).message}`);
        if (cur) this.delete(s.object_id);
        continue;
      }
      this.set(obj, cur);
    }
  }

  children(id: string | undefined): SceneObject[] {
    return [...this.objects.values()].filter((o) => parentOf(o.data) === id);
  }
}

// ---------------------------------------------------------------------------
// Rendering

const num = (v: Json | undefined, d: number) => (typeof v === 'number' && Number.isFinite(v) ? v : d);

function vec3(v: Json | undefined, d: number): { x: number; y: number; z: number } {
  if (isObject(v)) return { x: num(v.x, d), y: num(v.y, d), z: num(v.z, d) };
  return { x: d, y: d, z: d };
}

/** ARENA rotation: {x,y,z,w} is a quaternion, {x,y,z} Euler degrees. Returns Euler degrees (A-Frame's YXZ order). */
export function rotationDegrees(v: Json | undefined): { x: number; y: number; z: number } {
  if (!isObject(v)) return { x: 0, y: 0, z: 0 };
  if (typeof v.w === 'number') {
    const q = new THREE.Quaternion(num(v.x, 0), num(v.y, 0), num(v.z, 0), num(v.w, 1));
    if (q.lengthSq() === 0) return { x: 0, y: 0, z: 0 };
    q.normalize();
    const e = new THREE.Euler().setFromQuaternion(q, 'YXZ');
    const deg = THREE.MathUtils.radToDeg;
    return { x: deg(e.x), y: deg(e.y), z: deg(e.z) };
  }
  return vec3(v, 0);
}

const GEOMETRY_ALIASES: Record<string, string> = { cube: 'box', torusKnot: 'torusKnot', 'torus-knot': 'torusKnot' };
const PRIMITIVES = new Set(['box', 'sphere', 'cylinder', 'cone', 'plane', 'circle', 'ring', 'torus', 'torusKnot',
  'dodecahedron', 'icosahedron', 'octahedron', 'tetrahedron', 'triangle']);
const LIGHT_KEYS = ['type', 'color', 'intensity', 'distance', 'decay', 'angle', 'penumbra', 'groundColor', 'castShadow', 'target'];
const PASSTHROUGH = ['animation', 'shadow'];

/** The most segments a geometry is drawn with along one of its axes (A-Frame's own maximum where it has one). */
export const MAX_SEGMENTS = 256;

/**
 * Bounds the counts that size a geometry (segments*, detail) by their
 * schema's minimum and maximum, MAX_SEGMENTS where it has none: A-Frame
 * does not, and a circle with 10^7 segments, sent by any client, stalled
 * every page that drew it.
 */
function limitDetail(g: Record<string, unknown>, schema: Record<string, { min?: number; max?: number }>) {
  for (const [k, v] of Object.entries(g)) {
    if (!/segments|detail/i.test(k)) continue;
    const n = typeof v === 'number' ? v : typeof v === 'string' && v.trim() !== '' ? Number(v) : NaN;
    const lo = schema[k]?.min ?? 0, hi = schema[k]?.max ?? MAX_SEGMENTS;
    if (Number.isNaN(n)) delete g[k];
    else g[k] = Math.min(hi, Math.max(lo, Math.round(n)));
  }
}

export function isClickable(data: JsonObject): boolean {
  const c = data['click-listener'];
  if (c === undefined || c === null || c === false) return false;
  if (isObject(c)) return c.enabled !== false;
  return c !== 'false';
}

/** The A-Frame components that render one object. */
export function components(obj: SceneObject): Record<string, unknown> {
  const d = obj.data;
  const out: Record<string, unknown> = {};
  const kind = typeof d.object_type === 'string' ? d.object_type : 'entity';
  out.position = vec3(d.position, 0);
  out.rotation = rotationDegrees(d.rotation);
  out.scale = vec3(d.scale, 1);
  if (d.visible === false) out.visible = false;

  const material: Record<string, unknown> = isObject(d.material) ? { ...d.material } : {};
  if (typeof d.color === 'string' && material.color === undefined) material.color = d.color;
  if (typeof d.opacity === 'number' && material.opacity === undefined) material.opacity = d.opacity;
  if (typeof material.opacity === 'number' && material.opacity < 1 && material.transparent === undefined) material.transparent = true;

  const prim = GEOMETRY_ALIASES[kind] ?? kind;
  if (PRIMITIVES.has(prim)) {
    const g: Record<string, unknown> = { primitive: prim };
    const schema = AFRAME.geometries[prim]?.schema ?? {};
    for (const k of Object.keys(schema)) if (d[k] !== undefined && k !== 'primitive') g[k] = d[k];
    if (isObject(d.geometry)) Object.assign(g, d.geometry, { primitive: prim });
    limitDetail(g, schema);
    out.geometry = g;
    out.material = material;
  } else if (kind === 'image') {
    out.geometry = { primitive: 'plane', width: num(d.width, 1), height: num(d.height, 1) };
    const src = typeof d.url === 'string' ? d.url : typeof d.src === 'string' ? d.src : '';
    out.material = { shader: 'flat', side: 'double', transparent: true, ...material, src: src ? `url(${src})` : '' };
  } else if (kind === 'gltf-model') {
    const src = typeof d.url === 'string' ? d.url : typeof d.src === 'string' ? d.src : '';
    if (src) out['gltf-model'] = `url(${src})`;
  } else if (kind === 'text') {
    const t = isObject(d.text) ? d.text : {};
    const value = typeof d.value === 'string' ? d.value : typeof d.text === 'string' ? d.text : typeof t.value === 'string' ? t.value : '';
    const color = typeof d.color === 'string' ? d.color : typeof t.color === 'string' ? t.color : typeof material.color === 'string' ? material.color : '#ffffff';
    out['xr-text'] = {
      value, color,
      width: num(d.width, num(t.width as Json, 2)),
      align: typeof d.align === 'string' ? d.align : typeof t.align === 'string' ? t.align : 'center',
      background: typeof d.background === 'string' ? d.background : '',
    };
  } else if (kind === 'light') {
    const src: JsonObject = isObject(d.light) ? d.light : d;
    const l: Record<string, unknown> = {};
    for (const k of LIGHT_KEYS) if (src[k] !== undefined && src[k] !== null && !isObject(src[k])) l[k] = src[k];
    out.light = l;
  } else if (kind !== 'entity' && kind !== 'camera') {
    console.warn(`xrealm: object ${obj.id}: unknown object_type ${JSON.stringify(kind)}, shown as an empty entity`);
  }
  for (const k of PASSTHROUGH) if (isObject(d[k]) || typeof d[k] === 'string') out[k] = d[k];
  dropThrowing(obj.id, out);
  return out;
}

/**
 * Leaves out the values A-Frame throws on later, when the entity loads
 * (an uncaught error, out of reach of the caller): an unknown shader, a
 * light type it has not, an animation whose property is not a string.
 */
function dropThrowing(id: string, out: Record<string, unknown>) {
  const warn = (what: string) => console.warn(`xrealm: object ${id}: ${what}, left out`);
  const mat = out.material as Record<string, unknown> | undefined;
  if (mat?.shader !== undefined && !(typeof mat.shader === 'string' && Object.hasOwn(AFRAME.shaders, mat.shader))) {
    warn(`unknown material shader ${JSON.stringify(mat.shader)}`);
    delete mat.shader;
  }
  const light = out.light as Record<string, unknown> | undefined;
  const types: string[] = AFRAME.components.light?.schema?.type?.oneOf ?? [];
  if (light?.type !== undefined && !(typeof light.type === 'string' && types.includes(light.type))) {
    warn(`unknown light type ${JSON.stringify(light.type)}`);
    delete light.type;
  }
  const anim = out.animation;
  if (isObject(anim as Json) && (anim as JsonObject).property !== undefined && typeof (anim as JsonObject).property !== 'string') {
    warn(`animation property ${JSON.stringify((anim as JsonObject).property)} is not a string`);
    delete out.animation;
  }
}

type XrEl = HTMLElement & { setAttribute(n: string, v: unknown, clobber?: boolean): void; object3D: any; _xrComps?: Set<string> };

/**
 * The most objects nested in one another that are drawn, unless the
 * Renderer is given another maxDepth: A-Frame and
 * three.js walk the scene's tree by recursion, and a chain of thousands
 * of objects, each the parent of the next, would crash the page. The objects
 * nested deeper are left out (not drawn), with a warning, and drawn as
 * soon as the objects above them are nested less deep.
 */
export const MAX_DEPTH = 100;
/** Objects left out as nested too deep that are named on the console; after them only a count at 10, 100, 1000 … */
const TOO_DEEP_WARNINGS = 5;

/** The entities of objects in el. */
function objectChildren(el: Element): XrEl[] {
  return [...el.children].filter((c) => (c as HTMLElement).dataset?.objectId !== undefined) as XrEl[];
}

/** Takes el out of its parent, if it has one (A-Frame's remove() throws without). */
function detach(el: Element) {
  el.parentNode?.removeChild(el);
}

/**
 * Keeps one A-Frame entity per model object under root. An object whose
 * parent is not drawn waits for it among the orphans, out of the document
 * (A-Frame does nothing with an entity there): a tree of them is drawn
 * once, when its top's parent is, not again each time an object arrives
 * above it. An object nested deeper than maxDepth (under the root or
 * among the orphans) is left out: its entity is out of the document on
 * its own, with the objects in it, and goes into its parent's entity
 * when that is nested less deep.
 */
export class Renderer {
  readonly els = new Map<string, XrEl>();
  private orphans: HTMLElement;
  /** The objects among the orphans, by the parent they wait for. */
  private waits = new ParentWaits();
  /** The objects left out as nested too deep, by their parent. */
  private deep = new ParentWaits();
  /** How many times so far an object drawn, or to be drawn at the limit, was left out as nested too deep. */
  tooDeep = 0;

  /** The most objects nested in one another that are drawn: options.maxDepth, MAX_DEPTH by default. */
  readonly maxDepth: number;

  constructor(private model: SceneModel, private root: HTMLElement, options: { maxDepth?: number } = {}) {
    this.maxDepth = options.maxDepth ?? MAX_DEPTH;
    this.orphans = document.createElement('div');
    this.orphans.dataset.role = 'orphans';
    model.on((e) => this.onChange(e));
  }

  /**
   * How many objects wait among the orphans for their parent to be drawn:
   * the top of each tree that waits (the objects in it wait with it and
   * are not counted).
   */
  get waiting(): number {
    return this.waits.size;
  }

  private onChange(e: ModelEvent) {
    if (e.kind === 'delete') {
      this.undraw(e.id);
      return;
    }
    if (e.kind !== 'set') return;
    try {
      this.render(e.obj);
    } catch (err) {
      // (render catches A-Frame's throws per component; anything else
      // must not keep the others from being drawn either, also when a
      // whole scene is loaded at once)
      console.warn(`xrealm: object ${e.obj.id} could not be drawn: ${(err as Error).message}`);
    }
  }

  /** Removes the entity of object id; the objects in it, drawn or left out, wait for their parent again. */
  private undraw(id: string) {
    const el = this.els.get(id);
    this.els.delete(id);
    this.waits.set(id, undefined);
    this.deep.set(id, undefined);
    if (!el) return;
    const left = this.deep.take(id).map((c) => this.els.get(c)).filter((c) => c !== undefined);
    for (const c of [...objectChildren(el), ...left]) {
      const cid = c.dataset.objectId!;
      detach(c);
      this.place(cid, c, parentOf(this.model.objects.get(cid)?.data));
    }
    detach(el);
  }

  private render(obj: SceneObject) {
    // Only scene objects are drawn; scene-options, programs, ... are not.
    if (obj.type !== 'object') {
      this.undraw(obj.id);
      return;
    }
    let el = this.els.get(obj.id);
    if (!el) {
      el = document.createElement('a-entity') as XrEl;
      el.dataset.objectId = obj.id;
      this.els.set(obj.id, el);
    }
    const want = components(obj);
    const prev = el._xrComps ?? new Set<string>();
    for (const k of prev) if (!(k in want)) el.removeAttribute(k);
    for (const [k, v] of Object.entries(want)) {
      try {
        if (typeof v === 'object' && v !== null) el.setAttribute(k, v, true);
        else el.setAttribute(k, v as string);
      } catch (err) {
        // A-Frame throws on some values (a light's target that is not a
        // CSS selector): the object is drawn without that component, and
        // still placed under its parent, with the objects waiting for it.
        console.warn(`xrealm: object ${obj.id} could not be drawn: its ${k}: ${(err as Error).message}`);
      }
    }
    el._xrComps = new Set(Object.keys(want));
    el.classList.toggle('clickable', isClickable(obj.data));
    el.dataset.objectType = typeof obj.data.object_type === 'string' ? obj.data.object_type : 'entity';

    this.place(obj.id, el, parentOf(obj.data));
    // Objects waiting for this one move in.
    for (const cid of this.waits.take(obj.id)) {
      const c = this.els.get(cid);
      if (!c) continue;
      if (this.holds(c, el)) {
        // the cycle again, from the other side: the one waiting is drawn at the root
        console.warn(`xrealm: object ${cid}: its parent ${obj.id} is inside it (a parent cycle); it is drawn at the scene's root`);
        this.attach(c, this.root);
      } else this.attach(c, el);
    }
  }

  /**
   * Puts el, the entity of object id, in the entity of its parent pid, at
   * the root without one, or among the orphans, waiting for pid, while
   * pid is not drawn.
   */
  private place(id: string, el: XrEl, pid: string | undefined) {
    let target = (pid ? this.els.get(pid) : this.root) ?? this.orphans;
    if (target !== this.root && target !== this.orphans && (el.firstElementChild || this.deep.waitedFor(id)) && this.holds(el, target)) {
      // A parent cycle (the server takes one: b's parent a, then a's
      // parent b): the DOM cannot nest them, and appendChild would throw.
      console.warn(`xrealm: object ${id}: its parent ${pid} is inside it (a parent cycle); it is drawn where it was`);
      const at = el.parentElement;
      target = at && at !== this.orphans && this.depthOf(at) < this.maxDepth ? at : this.root;
    }
    this.waits.set(id, target === this.orphans ? pid : undefined);
    if (el.parentElement === target) return;
    const out = this.deep.parentOf(id);
    if (out !== undefined && this.els.get(out) === target) return; // left out, and still
    this.deep.set(id, undefined);
    this.attach(el, target);
  }

  /**
   * Whether target is el or inside it: in its entity, or in an entity
   * left out of it (out of the document, linked to it only here). The
   * walk up from target ends at the root, the orphans or an entity in
   * neither, and takes at most as many steps as there are entities.
   */
  private holds(el: Element, target: Element): boolean {
    let steps = this.els.size;
    for (let x: Element | undefined = target; x && x !== this.root && x !== this.orphans && steps-- >= 0; x = this.holder(x)) {
      if (x === el) return true;
    }
    return false;
  }

  /** The element x is in, or for an entity left out, the entity it is left out of. */
  private holder(x: Element): Element | undefined {
    if (x.parentElement) return x.parentElement;
    const id = (x as HTMLElement).dataset?.objectId;
    const out = id === undefined ? undefined : this.deep.parentOf(id);
    return out === undefined ? undefined : this.els.get(out);
  }

  /**
   * How deep el is: 0 for the root and the orphans, n for an object's
   * entity n objects down; Infinity when it is left out, or in an object
   * left out.
   */
  private depthOf(el: Element): number {
    let d = 0;
    for (let x: Element | null = el; x !== this.root && x !== this.orphans; x = x.parentElement) {
      if (!x || ++d > this.maxDepth) return Infinity;
    }
    return d;
  }

  /**
   * Puts el in target, with what it holds and the objects left out in
   * it, down to maxDepth; the objects deeper are left out (el itself when
   * target is at the limit or not drawn).
   */
  private attach(el: XrEl, target: HTMLElement) {
    const d = this.depthOf(target);
    // (an object that was drawn, or would be, is left out with a warning; one among the orphans quietly)
    const drawn = target.isConnected;
    if (d >= this.maxDepth) {
      this.leaveOut(el, target as XrEl, drawn || el.isConnected);
      return;
    }
    // Layer by layer, before anything moves: what is left out never
    // enters the scene, and what comes back goes in after its parent.
    const back: [XrEl, XrEl][] = [];
    const seen = new Set<XrEl>([el]);
    let layer = [el];
    for (let k = d + 1; layer.length; k++) {
      const next: XrEl[] = [];
      for (const e of layer) {
        if (k === this.maxDepth) {
          for (const c of objectChildren(e)) this.leaveOut(c, e, drawn || c.isConnected);
          continue;
        }
        for (const c of objectChildren(e)) {
          if (seen.has(c)) continue;
          seen.add(c);
          next.push(c);
        }
        for (const cid of this.deep.take(e.dataset.objectId!)) {
          const c = this.els.get(cid);
          if (!c || seen.has(c)) continue;
          seen.add(c);
          back.push([c, e]);
          next.push(c);
        }
      }
      layer = next;
    }
    if (el.parentElement !== target) target.appendChild(el);
    for (const [c, parent] of back) parent.appendChild(c);
  }

  /** Leaves el out, as an object in parent's entity nested too deep; warn: say so on the console. */
  private leaveOut(el: XrEl, parent: XrEl, warn: boolean) {
    const id = el.dataset.objectId!;
    detach(el);
    this.deep.set(id, parent.dataset.objectId);
    if (!warn) return;
    const n = ++this.tooDeep;
    const step = capStep(n, TOO_DEEP_WARNINGS);
    if (step === 'full' || step === 'last') {
      const more = step === 'last' ? ' (more are counted in xrealm.renderer.tooDeep, and logged at 10, 100, 1000 … of them)' : '';
      console.warn(`xrealm: object ${id} is nested deeper than ${this.maxDepth} objects (in ${parent.dataset.objectId}): it and the objects in it are not drawn${more}`);
    } else if (step === 'count') {
      console.warn(`xrealm: ${n} objects left out so far as nested deeper than ${this.maxDepth} objects; the last: ${id} (in ${parent.dataset.objectId})`);
    }
  }
}
