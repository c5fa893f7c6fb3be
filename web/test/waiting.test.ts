// Unit tests of the index of objects waiting for their parent
// (web/src/waiting.ts), which the renderer asks, when an object is drawn,
// for the objects to move into it.
import { describe, expect, it } from 'vitest';
import { ParentWaits } from '../src/waiting';

/** One step: an object waits for a parent (or none), or a parent is drawn and takes its waiting objects. */
type Step = ['wait', string, string | undefined] | ['take', string, string[]];

describe('ParentWaits', () => {
  const cases: { name: string; steps: Step[]; waiting: Record<string, string> }[] = [
    {
      name: 'children arriving before their parents move in when the parents are drawn, each with its own',
      steps: [
        ['wait', 'kid1', 'p'], ['wait', 'kid2', 'p'], ['wait', 'other', 'q'], ['wait', 'grandkid', 'kid1'],
        ['take', 'p', ['kid1', 'kid2']],
        ['take', 'p', []], // taken once
        ['take', 'kid1', ['grandkid']],
      ],
      waiting: { other: 'q' },
    },
    {
      name: 'a parent deleted and drawn again takes the children waiting for it again',
      steps: [
        ['wait', 'kid', 'p'], ['take', 'p', ['kid']],
        // p is deleted: its children wait for it again
        ['wait', 'kid', 'p'], ['take', 'q', []],
        ['take', 'p', ['kid']],
      ],
      waiting: {},
    },
    {
      name: 'a child whose parent id changes waits for the new parent only',
      steps: [
        ['wait', 'kid', 'old'], ['wait', 'kid', 'new'],
        ['take', 'old', []],
        ['take', 'new', ['kid']],
      ],
      waiting: {},
    },
    {
      name: 'a child drawn under a parent that is there, or at the root, waits no more',
      steps: [
        ['wait', 'a', 'p'], ['wait', 'b', 'p'], ['wait', 'a', undefined],
        ['take', 'p', ['b']],
      ],
      waiting: {},
    },
    {
      name: 'waiting for the same parent again keeps the place in the order',
      steps: [['wait', 'a', 'p'], ['wait', 'b', 'p'], ['wait', 'a', 'p'], ['take', 'p', ['a', 'b']]],
      waiting: {},
    },
    {
      name: 'thousands waiting for their own parents: each parent takes only its children',
      steps: [
        ...Array.from({ length: 5000 }, (_, i): Step => ['wait', `kid${i}`, `p${i % 1000}`]),
        ['take', 'p7', ['kid7', 'kid1007', 'kid2007', 'kid3007', 'kid4007']],
      ],
      waiting: Object.fromEntries(Array.from({ length: 5000 }, (_, i) => [`kid${i}`, `p${i % 1000}`]).filter(([, p]) => p !== 'p7')),
    },
  ];
  for (const c of cases) {
    it(c.name, () => {
      const w = new ParentWaits();
      for (const [i, s] of c.steps.entries()) {
        if (s[0] === 'wait') w.set(s[1], s[2]);
        else expect(w.take(s[1]), `step ${i}: take ${s[1]}`).toEqual(s[2]);
      }
      const want = Object.entries(c.waiting);
      expect(w.size).toBe(want.length);
      for (const [id, p] of want) {
        expect(w.parentOf(id), id).toBe(p);
        expect(w.waitedFor(p), p).toBe(true);
      }
      for (const s of c.steps) if (s[0] === 'take' && !want.some(([, p]) => p === s[1])) expect(w.waitedFor(s[1]), s[1]).toBe(false);
    });
  }
});
