// Unit tests of where the renderer (web/src/scene.ts) puts each object's
// entity: in its parent's, at the root, among the orphans waiting for its
// parent, or left out as nested deeper than its maxDepth, through parent
// cycles and random create/update/delete sequences checked against the
// model. The document is test/dom.ts; A-Frame, which needs a browser, is
// replaced by its empty registries (no geometry, shader or component is
// known, so none is checked): what is tested is the tree, not the drawing.
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { parentOf, type Message } from '../src/protocol';
import { Renderer, SceneModel } from '../src/scene';
import { fakeDocument, type FakeElement } from './dom';

vi.mock('../src/aframe', () => ({ AFRAME: { geometries: {}, shaders: {}, components: {} }, THREE: {} }));

let warnings: string[] = [];
beforeEach(() => {
  warnings = [];
  vi.spyOn(console, 'warn').mockImplementation((...a: unknown[]) => void warnings.push(a.join(' ')));
  vi.spyOn(console, 'debug').mockImplementation(() => {});
});
afterEach(() => vi.restoreAllMocks());

/** A model and its renderer drawing into a fake document, at most maxDepth objects deep. */
function scene(maxDepth: number) {
  const root = fakeDocument();
  const model = new SceneModel();
  const r = new Renderer(model, root, { maxDepth });
  const send = (m: Partial<Message> & Pick<Message, 'object_id' | 'action'>) => model.apply({ type: 'object', ...m } as Message);
  const create = (id: string, parent?: string, type = 'object') =>
    send({ object_id: id, action: 'create', type, data: { object_type: 'box', ...(parent ? { parent } : {}) } });
  const el = (id: string) => r.els.get(id) as unknown as FakeElement | undefined;
  const rootEl = root as unknown as FakeElement;
  /** The entity an entity is in: its element's parent, or for one left out, the entity it is left out of. */
  const holder = (e: FakeElement): FakeElement | undefined => {
    if (e.parentElement) return e.parentElement;
    const p = (r as unknown as { deep: { parentOf(id: string): string | undefined } }).deep.parentOf(e.dataset.objectId!);
    return p === undefined ? undefined : el(p);
  };
  /** Where object id is: 'none' (no entity), 'root', 'waiting' (among the orphans), 'left out' (detached), or its parent entity's id. */
  const where = (id: string) => {
    const p = el(id)?.parentElement;
    if (!el(id)) return 'none';
    if (!p) return 'left out';
    if (p === rootEl) return 'root';
    return p.dataset.role === 'orphans' ? 'waiting' : p.dataset.objectId ?? '?';
  };
  const drawn = () => [...r.els.values()].filter((e) => e.isConnected).length;
  return { model, r, root: rootEl, send, create, el, holder, where, drawn };
}

type Scene = ReturnType<typeof scene>;

/**
 * What is wrong in any state, cycles or not: an error drawing; an entity
 * drawn deeper than maxDepth, or of an object not in the model or not a
 * scene object; a loop of entities, each in the next (by the document or
 * by being left out of it), or a left-out entity still in the document.
 */
function brokenAnyway(s: Scene, maxDepth: number): string[] {
  const bad = warnings.filter((w) => /could not be drawn/.test(w));
  const deep = (s.r as unknown as { deep: { parentOf(id: string): string | undefined } }).deep;
  for (const [id, e] of s.r.els as unknown as Map<string, FakeElement>) {
    const o = s.model.objects.get(id);
    if (!o || o.type !== 'object') {
      bad.push(`${id}: an entity for ${o ? `a ${o.type}` : 'a deleted object'}`);
      continue;
    }
    if (deep.parentOf(id) !== undefined && e.parentElement) bad.push(`${id}: left out, but in the document`);
    let d = 0;
    const seen = new Set<FakeElement>();
    for (let x: FakeElement | undefined = e; x && x !== s.root && x.dataset.role !== 'orphans'; x = s.holder(x)) {
      if (seen.has(x)) {
        bad.push(`${id}: in a loop of entities`);
        break;
      }
      seen.add(x);
      d++;
    }
    if (e.isConnected && d > maxDepth) bad.push(`${id}: drawn ${d} deep`);
  }
  return bad;
}

/**
 * What is wrong in a state whose parents make no cycle: each object is
 * in its parent's entity, at the root without a parent, or waits among
 * the orphans while the parent is not drawn; drawn when its chain of
 * parents reaches the root within maxDepth, left out (out of the
 * document, with the objects in it) when nested deeper.
 */
function broken(s: Scene, maxDepth: number): string[] {
  const bad = brokenAnyway(s, maxDepth);
  let tops = 0;
  for (const o of s.model.objects.values()) {
    const e = s.el(o.id);
    if (o.type !== 'object') continue;
    if (!e) {
      bad.push(`${o.id}: no entity`);
      continue;
    }
    // depth below the root, or below the orphans for an object whose chain ends at one not drawn
    let depth = 1, waits = false;
    for (let x = o; ; depth++) {
      const p = parentOf(x.data);
      if (p === undefined) break;
      const po = s.model.objects.get(p);
      if (!po || po.type !== 'object') {
        waits = true;
        break;
      }
      x = po;
    }
    const p = parentOf(o.data);
    const po = p === undefined ? undefined : s.model.objects.get(p);
    const top = po === undefined || po.type !== 'object';
    if (p !== undefined && top) tops++;
    const wantHolder = p === undefined ? 'root' : top ? 'waiting' : p;
    const holder = s.holder(e);
    const got = !holder ? 'nothing' : holder === s.root ? 'root' : holder.dataset.role === 'orphans' ? 'waiting' : holder.dataset.objectId;
    if (got !== wantHolder) bad.push(`${o.id}: in ${got}, not ${wantHolder}`);
    const want = !waits && depth <= maxDepth;
    if (e.isConnected !== want) bad.push(`${o.id}: ${depth} deep${waits ? ', waiting' : ''}, ${e.isConnected ? '' : 'not '}drawn`);
    if (depth === maxDepth + 1 && e.parentElement) bad.push(`${o.id}: ${depth} deep, not left out`);
  }
  if (s.r.waiting !== tops) bad.push(`${s.r.waiting} waiting, not ${tops}`);
  return bad;
}

describe('Renderer: parent cycles through objects left out as nested too deep', () => {
  it('a cycle through a left-out object is a cycle: the object stays where it was, and nothing else moves', () => {
    const D = 5;
    const s = scene(D);
    for (let i = 0; i <= D + 1; i++) s.create(`c${i}`, i ? `c${i - 1}` : undefined);
    expect(broken(s, D)).toEqual([]);
    expect(s.where(`c${D}`), 'the deepest but one').toBe('left out');
    warnings = [];
    s.send({ object_id: 'c0', action: 'update', data: { parent: `c${D + 1}` } });
    expect(warnings).toEqual([`xrealm: object c0: its parent c${D + 1} is inside it (a parent cycle); it is drawn where it was`]);
    expect(s.where('c0')).toBe('root');
    expect(s.drawn()).toBe(D);
    expect(brokenAnyway(s, D)).toEqual([]);
    // and out of the cycle again
    s.send({ object_id: 'c0', action: 'update', data: { parent: null } });
    expect(broken(s, D)).toEqual([]);
  });

  it('an object waiting for a parent inside it, through one left out, is a cycle: it goes to the root', () => {
    const D = 3;
    const s = scene(D);
    // w waits for p; w's chain is longer than D, so its last one is left out among the orphans
    s.create('w', 'p');
    for (let i = 0; i <= D; i++) s.create(`w${i}`, i ? `w${i - 1}` : 'w');
    expect(s.where(`w${D - 1}`)).toBe('left out');
    warnings = [];
    s.create('p', `w${D}`);
    expect(warnings.filter((w) => /cycle/.test(w))).toEqual([`xrealm: object w: its parent p is inside it (a parent cycle); it is drawn at the scene's root`]);
    expect(s.where('w')).toBe('root');
    expect(brokenAnyway(s, D)).toEqual([]);
    s.send({ object_id: 'p', action: 'update', data: { parent: null } });
    s.create('w', 'p');
    expect(broken(s, D)).toEqual([]);
  });

  it('objects once in a cycle of left-out objects go where their parents are when the cycle is gone', () => {
    // A sequence found by a random search: with the cycles missed, o1,
    // o3 and o4 stayed in one another, out of the document.
    const D = 6;
    const s = scene(D);
    const base = Array.from({ length: D - 4 }, (_, i) => `b${i}`);
    for (const [i, id] of base.entries()) s.create(id, i ? base[i - 1] : undefined);
    const b = base.at(-1)!;
    const steps: ['create' | 'update', string, string][] = [
      ['create', 'o3', b], ['create', 'o4', b], ['create', 'o2', b], ['update', 'o2', 'o5'], ['create', 'o5', b],
      ['update', 'o3', 'o4'], ['create', 'o1', 'o3'], ['update', 'o4', 'o2'], ['create', 'o4', 'o1'],
      ['create', 'o7', 'o3'], ['create', 'o1', 'o7'],
    ];
    for (const [action, id, parent] of steps) {
      if (action === 'create') s.create(id, parent);
      else s.send({ object_id: id, action: 'update', data: { parent } });
      expect(brokenAnyway(s, D), `${action} ${id} in ${parent}`).toEqual([]);
    }
    for (const id of ['o1', 'o2', 'o3', 'o4', 'o5', 'o7']) s.create(id, b);
    expect(Object.fromEntries(['o1', 'o2', 'o3', 'o4', 'o5', 'o7'].map((id) => [id, s.where(id)]))).toEqual(
      { o1: b, o2: b, o3: b, o4: b, o5: b, o7: b });
    expect(broken(s, D)).toEqual([]);
  });
});

describe('Renderer: random create, update and delete against the model', () => {
  /** A deterministic pseudo-random source: the same seed, the same sequence. */
  const random = (seed: number) => (n: number) => {
    seed = (seed * 1103515245 + 12345) & 0x7fffffff;
    return (seed >>> 8) % n;
  };
  /** Would id's parent p make a cycle? */
  const cycle = (s: Scene, id: string, p: string) => {
    for (let x: string | undefined = p, i = 0; x !== undefined && i <= s.model.objects.size; x = parentOf(s.model.objects.get(x)?.data), i++) {
      if (x === id) return true;
    }
    return false;
  };
  const cases = [
    { name: 'at the root, no cycles', maxDepth: 3, base: 0, cycles: false },
    { name: 'under a chain near the limit, no cycles', maxDepth: 6, base: 3, cycles: false },
    { name: 'at the root, with cycles', maxDepth: 3, base: 0, cycles: true },
    { name: 'under a chain near the limit, with cycles', maxDepth: 6, base: 3, cycles: true },
  ];
  for (const c of cases) {
    it(c.name, () => {
      const ids = Array.from({ length: 8 }, (_, i) => `o${i}`);
      for (let seed = 1; seed <= 150; seed++) {
        const rand = random(seed);
        const s = scene(c.maxDepth);
        const base = Array.from({ length: c.base }, (_, i) => `b${i}`);
        for (const [i, id] of base.entries()) s.create(id, i ? base[i - 1] : undefined);
        const top = base.at(-1);
        const log: string[] = [];
        for (let step = 0; step < 60; step++) {
          const id = ids[rand(ids.length)];
          const k = rand(10);
          const parent = rand(4) === 0 ? top : ids[rand(ids.length)];
          if (!c.cycles && k < 8 && parent !== undefined && cycle(s, id, parent)) continue;
          if (k < 5) {
            const type = rand(8) === 0 ? 'program' : 'object';
            log.push(`create ${type} ${id} in ${parent}`);
            s.create(id, parent, type);
          } else if (k < 8) {
            log.push(`update ${id} to ${parent}`);
            s.send({ object_id: id, action: 'update', data: { parent: parent ?? null } });
          } else {
            log.push(`delete ${id}`);
            s.send({ object_id: id, action: 'delete' });
          }
          const bad = c.cycles ? brokenAnyway(s, c.maxDepth) : broken(s, c.maxDepth);
          expect(bad, `seed ${seed}:\n${log.join('\n')}`).toEqual([]);
        }
        // every object made again under the base: all where the model says
        for (const id of ids) if (s.model.objects.has(id)) s.create(id, top);
        expect(broken(s, c.maxDepth), `seed ${seed}, all made again:\n${log.join('\n')}`).toEqual([]);
      }
    });
  }
});

describe('Renderer: warnings of objects left out', () => {
  it('names the first five, then gives the count at 10, 100 …', () => {
    const s = scene(1);
    s.create('p');
    for (let i = 1; i <= 120; i++) s.create(`k${i}`, 'p');
    const deeper = (id: string, more = '') =>
      `xrealm: object ${id} is nested deeper than 1 objects (in p): it and the objects in it are not drawn${more}`;
    expect(warnings).toEqual([
      deeper('k1'), deeper('k2'), deeper('k3'), deeper('k4'),
      deeper('k5', ' (more are counted in xrealm.renderer.tooDeep, and logged at 10, 100, 1000 … of them)'),
      'xrealm: 10 objects left out so far as nested deeper than 1 objects; the last: k10 (in p)',
      'xrealm: 100 objects left out so far as nested deeper than 1 objects; the last: k100 (in p)',
    ]);
    expect(s.r.tooDeep).toBe(120);
  });
});
