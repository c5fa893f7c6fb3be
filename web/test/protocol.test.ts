// Unit tests of the protocol rules the client shares with the server
// (scene/scene.go, topic/arena.go).
import { describe, expect, it } from 'vitest';
import {
  checkMessage, descendants, merge, parentsFirst, parseImport, parseMessage, parseObjectJSON, parseTopic, ProtocolError,
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
