// Unit tests of the protocol rules the client shares with the server
// (scene/scene.go, topic/arena.go).
import { describe, expect, it } from 'vitest';
import {
  checkMessage, clean, descendants, merge, parentsFirst, parseImport, parseMessage, parseObjectJSON, parseTopic, ProtocolError,
  SCENE_NAME_CHARS, SCENE_NAME_PATTERN, sceneNameError, storeImport, validSceneName, jwtClaims, tokenProblem,
} from '../src/protocol';

describe('parseTopic', () => {
  it('parses seven and eight levels', () => {
    expect(parseTopic('realm/s/public/lobby/o/pyClient-1/box')).toEqual({
      realm: 'realm', namespace: 'public', scene: 'lobby', msgType: 'o', userClient: 'pyClient-1', id: 'box',
    });
    expect(parseTopic('realm/s/a/b/u/c/d/e').toUid).toBe('e');
  });
  it('refuses other topics', () => {
    for (const t of ['realm/s/a/b/o/c', 'realm/d/a/b/o/c/d', 'realm/s/a/b/z/c/d', 'realm/s/a//o/c/d', 'realm/s/a/b/o/c/d/e/f', 'realm/s/a/b/o/+/d']) {
      expect(() => parseTopic(t), t).toThrow(ProtocolError);
    }
  });
});

describe('checkMessage', () => {
  const t = parseTopic('realm/s/a/b/o/c/box');
  it('accepts a valid message and normalises a string ttl', () => {
    const m = checkMessage(t, { object_id: 'box', action: 'create', type: 'object', persist: true, ttl: '5', data: { x: 1 } });
    expect(m.ttl).toBe(5);
  });
  it('refuses what the server refuses', () => {
    const bad: unknown[] = [
      [], 'x', null, { action: 'create' }, { object_id: 'other', action: 'create' }, { object_id: 'box', action: 'Create' },
      { object_id: 'box', action: 'create', persist: 'yes' }, { object_id: 'box', action: 'create', ttl: -1 },
      { object_id: 'box', action: 'create', data: [1] }, { object_id: 'box', action: 'create', type: 3 },
    ];
    for (const b of bad) expect(() => checkMessage(t, b), JSON.stringify(b)).toThrow(ProtocolError);
    expect(() => parseMessage(t, '{not json')).toThrow(ProtocolError);
  });
});

describe('merge', () => {
  it('deep-merges objects, replaces arrays and scalars, and removes nulls', () => {
    const dst = { position: { x: 1, y: 2, z: 3 }, material: { color: 'red', opacity: 0.5 }, tags: [1, 2], keep: true } as any;
    merge(dst, { position: { x: 5 }, material: { opacity: null }, tags: [3], rotation: { x: 1, w: null }, keep: null } as any);
    expect(dst).toEqual({ position: { x: 5, y: 2, z: 3 }, material: { color: 'red' }, tags: [3], rotation: { x: 1 } });
  });
  it('does not alias the delta', () => {
    const delta = { a: { b: 1 } } as any;
    const dst = merge({}, delta);
    delta.a.b = 2;
    expect(dst.a).toEqual({ b: 1 });
  });
  it('keeps a "__proto__" key of a message as data: it changes no prototype', () => {
    // what a client on the bus can send: JSON.parse makes "__proto__" an own key
    const m = parseMessage(parseTopic('realm/s/a/b/o/c/box'),
      '{"object_id":"box","action":"create","data":{"__proto__":{"polluted":1},"material":{"__proto__":{"color":"red"}}}}');
    try {
      const created = clean(m.data!);
      expect(({} as any).polluted).toBeUndefined();
      expect(Object.getPrototypeOf(created)).toBe(Object.prototype);
      expect((created.material as any).color).toBeUndefined();
      expect(JSON.parse(JSON.stringify(created))).toEqual(JSON.parse('{"__proto__":{"polluted":1},"material":{"__proto__":{"color":"red"}}}'));
      // an update merges into it, and a null removes it
      merge(created, JSON.parse('{"__proto__":{"more":2}}'));
      expect(({} as any).more).toBeUndefined();
      expect(JSON.stringify(created)).toBe('{"__proto__":{"polluted":1,"more":2},"material":{"__proto__":{"color":"red"}}}');
      merge(created, JSON.parse('{"__proto__":null}'));
      expect(JSON.stringify(created)).toBe('{"material":{"__proto__":{"color":"red"}}}');
    } finally {
      for (const k of ['polluted', 'more', 'color']) delete (Object.prototype as any)[k];
    }
  });
});

describe('parents', () => {
  it('orders parents before children and survives cycles', () => {
    const objs = [
      { object_id: 'c', parent: 'b' }, { object_id: 'b', parent: 'a' }, { object_id: 'a' }, { object_id: 'x', parent: 'missing' },
      { object_id: 'p', parent: 'q' }, { object_id: 'q', parent: 'p' },
    ];
    const cycles: string[] = [];
    const order = parentsFirst(objs, (id) => cycles.push(id)).map((o) => o.object_id);
    expect(order.indexOf('a')).toBeLessThan(order.indexOf('b'));
    expect(order.indexOf('b')).toBeLessThan(order.indexOf('c'));
    expect(order).toHaveLength(6);
    expect(cycles).not.toHaveLength(0);
  });
  it('finds descendants', () => {
    const objs: { id: string; data: Record<string, string> }[] = [{ id: 'a', data: {} }, { id: 'b', data: { parent: 'a' } }, { id: 'c', data: { parent: 'b' } }, { id: 'd', data: {} }];
    expect(descendants('a', objs).sort()).toEqual(['b', 'c']);
    // depth first, each after its parent; a cycle below the object ends the walk
    const tree = [['b', 'a'], ['c', 'a'], ['b1', 'b'], ['b2', 'b'], ['b11', 'b1'], ['c1', 'c'], ['x', 'y'], ['y', 'x']];
    expect(descendants('a', tree.map(([id, parent]) => ({ id, data: { parent } })))).toEqual(['b', 'b1', 'b11', 'b2', 'c', 'c1']);
    expect(descendants('x', tree.map(([id, parent]) => ({ id, data: { parent } })))).toEqual(['y']);
  });
  it('takes parent chains 10,000 deep, in any order, with a cycle at the top', () => {
    // (a chain of objects, each the parent of the next, is a scene a
    // program may make; a recursive walk of it overflows the stack)
    const n = 10_000;
    const chain = Array.from({ length: n }, (_, i) => ({ object_id: `c${i}`, parent: i ? `c${i - 1}` : undefined as string | undefined }));
    const cyclic = chain.map((o) => (o.object_id === 'c0' ? { ...o, parent: `c${n - 1}` } : o));
    const orders: [string, typeof chain][] = [
      ['parents first', chain], ['children first', [...chain].reverse()],
      ['shuffled', [...chain].sort((a, b) => ((Number(a.object_id.slice(1)) * 7919) % n) - ((Number(b.object_id.slice(1)) * 7919) % n))],
      ['a cycle, children first', [...cyclic].reverse()],
    ];
    for (const [name, objs] of orders) {
      const cycles: string[] = [];
      const out = parentsFirst(objs, (id) => cycles.push(id));
      expect(out, name).toHaveLength(n);
      expect(new Set(out.map((o) => o.object_id)).size, name).toBe(n);
      const at = new Map(out.map((o, i) => [o.object_id, i]));
      const late = objs.filter((o) => o.parent && at.get(o.parent)! > at.get(o.object_id)!).map((o) => o.object_id);
      // only a cycle puts an object before its parent: where it was broken
      const cycle = name.includes('cycle');
      expect(cycles, name).toEqual(cycle ? [`c${n - 1}`] : []);
      expect(late, name).toEqual(cycle ? ['c0'] : []);
      const all = objs.map((o) => ({ id: o.object_id, data: (o.parent ? { parent: o.parent } : {}) as Record<string, string> }));
      const ids = chain.map((o) => o.object_id);
      expect(descendants('c0', all), name).toEqual(ids.slice(1));
      expect(descendants(`c${n - 2}`, all), name).toEqual(cycle ? [`c${n - 1}`, ...ids.slice(0, n - 2)] : [`c${n - 1}`]);
    }
  });
});

describe('editor input', () => {
  it('imports stored objects and messages, parents first', () => {
    const objs = parseImport(JSON.stringify([
      { object_id: 'kid', type: 'object', attributes: { object_type: 'box', parent: 'root' } },
      { object_id: 'root', data: { object_type: 'entity' } },
    ]));
    expect(objs.map((o) => o.object_id)).toEqual(['root', 'kid']);
    expect(objs[1].type).toBe('object');
  });
  it('refuses bad imports', () => {
    for (const s of ['{}', '[1]', '[{"object_id":"a/b","attributes":{}}]', '[{"object_id":"a"}]', '[{"object_id":"a","data":{}},{"object_id":"a","data":{}}]', 'nope']) {
      expect(() => parseImport(s), s).toThrow(ProtocolError);
    }
  });
  it('stores an import in order and says how many were stored when one fails', async () => {
    const objs = ['a', 'b', 'c'].map((object_id) => ({ object_id }));
    const cases: { failing?: string; stored: string[]; error?: string }[] = [
      { stored: ['a', 'b', 'c'] },
      { failing: 'a', stored: [], error: 'stored 0 of 3 objects; object a failed: connection lost' },
      { failing: 'b', stored: ['a'], error: 'stored 1 of 3 objects; object b failed: connection lost' },
      { failing: 'c', stored: ['a', 'b'], error: 'stored 2 of 3 objects; object c failed: connection lost' },
    ];
    for (const c of cases) {
      const stored: string[] = [];
      const run = storeImport(objs, async (o) => {
        if (o.object_id === c.failing) throw new Error('connection lost');
        stored.push(o.object_id);
      });
      if (c.error) await expect(run, String(c.failing)).rejects.toThrow(c.error);
      else expect(await run).toBe(3);
      expect(stored, String(c.failing)).toEqual(c.stored);
    }
    expect(await storeImport([], async () => {})).toBe(0);
  });
  it('validates raw object JSON', () => {
    expect(parseObjectJSON('{"object_id":"a","type":"object","data":{"object_type":"box","position":{"x":1,"y":2,"z":3}}}').object_id).toBe('a');
    for (const s of [
      '{"object_id":"a","data":{}}', '{"object_id":"","data":{"object_type":"box"}}', '{"object_id":"a","data":{"object_type":"box","position":{"x":"1","y":0,"z":0}}}',
      '{"object_id":"a","data":{"object_type":"box","parent":"a"}}', '[]', '{',
    ]) {
      expect(() => parseObjectJSON(s), s).toThrow(ProtocolError);
    }
  });
});

// The cases of topic/name_test.go's TestValidSceneName, with the same
// expected parts of the message, and the boundaries around them.
describe('scene names (topic.ValidSceneName)', () => {
  const goCases: [string, string][] = [
    ['lab', ''],
    ['Alice_2-room=b', ''],
    ['0', ''],
    ['', 'scene name is empty'],
    ['+', "'+' is not allowed (an MQTT wildcard"],
    ['a#', "'#' is not allowed (an MQTT wildcard"],
    ['a.b', "'.' is not allowed"],
    ['a/b', "'/' is not allowed (it separates"],
    ['a b', "' ' is not allowed"],
    ['*', "'*' is not allowed"],
    ['>', "'>' is not allowed"],
    ['é', "'é' is not allowed"],
    ['a\x00', "'\\x00' is not allowed"],
    ['a%2F', "'%' is not allowed"],
  ];
  it('accepts and refuses what the server does, in its words', () => {
    for (const [name, want] of goCases) {
      const err = sceneNameError('scene', name);
      if (want === '') expect(err, name).toBeNull();
      else expect(err, name).toContain(want);
      expect(validSceneName(name), name).toBe(want === '');
    }
  });
  it('names what is refused and says which characters a name may hold', () => {
    expect(sceneNameError('scene', 'a@b')).toBe(`scene name "a@b": '@' is not allowed; a name may contain only ${SCENE_NAME_CHARS}`);
    expect(sceneNameError('namespace', '')).toBe('namespace name is empty');
    expect(sceneNameError('namespace', 'x.y')).toMatch(/^namespace name "x.y": '.' is not allowed/);
    // the first character refused, counted by code point
    expect(sceneNameError('scene', 'ok😀.')).toContain("'😀' is not allowed");
    expect(sceneNameError('scene', 'a.b c')).toContain("'.' is not allowed");
  });
  it('each allowed character, alone and within a name', () => {
    const allowed = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_=';
    for (const c of allowed) {
      expect(validSceneName(c), c).toBe(true);
      expect(validSceneName(`a${c}b`), c).toBe(true);
    }
    // names may start or end with any of them, '-', '_' and '=' too
    for (const n of ['-a', 'a-', '_', '=', '=a=', '--']) expect(validSceneName(n), n).toBe(true);
  });
  it('every other ASCII character is refused, and a few beyond ASCII', () => {
    const allowed = new Set('ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_=');
    for (let n = 0; n < 128; n++) {
      const c = String.fromCharCode(n);
      if (allowed.has(c)) continue;
      expect(validSceneName(c), `char ${n}`).toBe(false);
      expect(validSceneName(`a${c}b`), `char ${n}`).toBe(false);
    }
    for (const c of ['@', '.', '%', '~', '\u00e9', '\u00a0', '\u200b', '\u0391', '\uff41', '😀', '\u0000', '\u007f']) {
      expect(validSceneName(c), JSON.stringify(c)).toBe(false);
    }
  });
  it('has no length limit, as the server has none', () => {
    for (const n of [1, 63, 64, 65, 200, 1000]) expect(validSceneName('a'.repeat(n)), `length ${n}`).toBe(true);
    expect(validSceneName('a'.repeat(1000) + '.')).toBe(false);
  });
  it('the HTML pattern agrees with the rule', () => {
    // a pattern attribute matches the whole value, with the v flag
    const re = new RegExp(`^(?:${SCENE_NAME_PATTERN})$`, 'v');
    for (let n = 0; n < 0x250; n++) {
      const c = String.fromCharCode(n);
      expect(re.test(`x${c}`), `char ${n}`).toBe(validSceneName(`x${c}`));
    }
    for (const s of ['a=b', 'a@b', 'Alice_2-room=b', 'a.b', 'a b', 'a'.repeat(65)]) expect(re.test(s), s).toBe(validSceneName(s));
  });
});

describe('sign-in tokens', () => {
  const b64url = (v: unknown) => Buffer.from(JSON.stringify(v)).toString('base64url');
  const jwt = (claims: unknown, header: unknown = { alg: 'EdDSA', typ: 'JWT' }) => `${b64url(header)}.${b64url(claims)}.c2lnbmF0dXJl`;
  it('takes a JWT that names a user, whatever its signature and expiry', () => {
    for (const t of [jwt({ sub: 'alice' }), jwt({ sub: 'alice', exp: 1 }), ` ${jwt({ sub: 'ålice' })}\n`, jwt({ sub: 'a' }).replace(/c2ln.*$/, '')]) {
      expect(tokenProblem(t), t).toBeNull();
    }
    expect(jwtClaims(jwt({ sub: 'ålice', exp: 5 }))).toEqual({ sub: 'ålice', exp: 5 });
  });
  it('refuses what is not one, and says why', () => {
    const good = jwt({ sub: 'alice', exp: 2e9 });
    const cases: [string, RegExp][] = [
      ['', /empty/],
      ['   ', /empty/],
      ['garbage', /not a JWT.*no "\."/],
      [good.slice(0, good.indexOf('.') + 10), /not a JWT.*2 parts.*cut short/], // cut in the claims
      [`${good}.x`, /4 parts/],
      [`x${good}`, /header/],
      [`!!.${b64url({ sub: 'a' })}.s`, /header/],
      [`${b64url({ alg: 'x' })}.${b64url({ sub: 'alice' }).slice(0, -3)}.s`, /claims/],
      [`${b64url({ alg: 'x' })}.${b64url([1, 2])}.s`, /claims/],
      [`${b64url({ alg: 'x' })}.${Buffer.from('\xff\xfe{}', 'latin1').toString('base64url')}.s`, /claims/],
      [jwt({ user: 'alice' }), /no user/],
      [jwt({ sub: '' }), /no user/],
      [jwt({ sub: 7 }), /no user/],
      [jwt({ sub: 'a', exp: 'tomorrow' }), /exp/],
      [`${good.slice(0, good.lastIndexOf('.'))}.sig/with+slash`, /signature/],
    ];
    for (const [t, want] of cases) expect(tokenProblem(t), JSON.stringify(t)).toMatch(want);
    expect(jwtClaims('garbage')).toBeNull();
  });
});
