// The scene editor at /{ns}/{scene}/edit: object tree, create from a
// primitive or a GLTF URL, edit as a form or raw JSON, delete (with its
// descendants), duplicate, export and import. Every change is a persisted
// bus message (QoS 1, persist:true); the panel shows the scene as the bus
// reports it back, so what you see is what was stored. Without write rights
// the panel is read-only and says why.

import { persistGet, identity } from './auth';
import {
  descendants, isObject, parentOf, parseImport, parseObjectJSON, parentsFirst, randomSuffix, storeImport, validId,
  ProtocolError, type JsonObject, type Message, type StoredObject,
} from './protocol';
import { MAX_DEPTH, rotationDegrees, type SceneObject } from './scene';
import { h, panelToggle, toast } from './ui';
import type { Viewer } from './viewer';

const READ_ONLY = 'Read-only: your token may not edit this scene.';

export const CREATABLE = ['box', 'sphere', 'cylinder', 'cone', 'plane', 'circle', 'ring', 'torus', 'text', 'light', 'image', 'gltf-model', 'entity'] as const;

/** A colour as the colour input takes it (#rrggbb), from #rrggbb or #rgb; null for other forms. */
export function hexColor(v: unknown): string | null {
  if (typeof v !== 'string') return null;
  if (/^#[0-9a-fA-F]{6}$/.test(v)) return v.toLowerCase();
  if (/^#[0-9a-fA-F]{3}$/.test(v)) return '#' + [...v.slice(1)].map((x) => x + x).join('').toLowerCase();
  return null;
}

function defaultsFor(kind: string, url: string): JsonObject {
  const color = `#${randomSuffix(3).split('').map((c) => '3579bdf'[parseInt(c, 36) % 7]).join('')}`;
  switch (kind) {
    case 'text':
      return { object_type: 'text', value: 'Hello', color: '#ffffff', width: 2, background: 'rgba(0,0,0,0.4)' };
    case 'light':
      return { object_type: 'light', type: 'point', color: '#ffffff', intensity: 1.5, distance: 20 };
    case 'image':
      return { object_type: 'image', url, width: 1.6, height: 0.9 };
    case 'gltf-model':
      return { object_type: 'gltf-model', url };
    case 'entity':
      return { object_type: 'entity' };
    case 'plane':
    case 'circle':
    case 'ring':
      return { object_type: kind, material: { color, side: 'double' } };
    default:
      return { object_type: kind, material: { color } };
  }
}

const r3 = (v: number) => Math.round(v * 1000) / 1000;

/** Runs an async UI action whose failures were already shown to the user. */
const guard = <A extends unknown[]>(f: (...a: A) => Promise<void>) => (...a: A) => {
  f(...a).catch((e) => console.debug('xrealm editor: action stopped:', e?.message ?? e));
};

export function startEditor(v: Viewer) {
  document.body.classList.add('editing');
  let selected: string | null = null;
  let pendingSelect: string | null = null;
  let canEdit = false;
  // The fields of the detail the user changed since it was drawn (input
  // ids). While there are any, a change of the object by someone else does
  // not redraw the detail (it would drop what was typed) but shows #f-stale.
  let touched = new Set<string>();

  // --- layout
  const banner = h('div', { id: 'xr-readonly', class: 'readonly', hidden: true });
  const typeSel = h('select', { id: 'new-type' }, ...CREATABLE.map((t) => h('option', { value: t }, t)));
  const urlInput = h('input', { id: 'new-url', placeholder: 'URL (image, gltf-model)', size: 18 });
  const idInput = h('input', { id: 'new-id', placeholder: 'id (optional)', size: 10 });
  const createBtn = h('button', { id: 'new-create', type: 'submit' }, 'Create');
  const createForm = h('form', { id: 'xr-new', class: 'row' }, typeSel, urlInput, idInput, createBtn);
  const exportBtn = h('button', { id: 'xr-export', type: 'button' }, 'Export JSON');
  const importFile = h('input', { id: 'xr-import-file', type: 'file', accept: '.json,application/json' });
  const importBtn = h('button', { id: 'xr-import', type: 'button' }, 'Import');
  const tree = h('ul', { id: 'xr-tree', class: 'tree' });
  const detail = h('div', { id: 'xr-detail' }, h('p', { class: 'hint' }, 'Select an object.'));
  const panel = h('aside', { id: 'xr-editor' },
    h('h2', {}, 'Scene editor'), banner,
    h('section', {}, h('h3', {}, 'New object'), createForm),
    h('section', {}, h('h3', {}, 'Objects'), tree),
    h('section', {}, h('h3', {}, 'Selected'), detail),
    h('section', {}, h('h3', {}, 'Scene'), h('div', { class: 'row' }, exportBtn), h('div', { class: 'row' }, importFile, importBtn)),
  );
  document.getElementById('app')!.appendChild(panel);
  // Editor shows and hides it, as Panel does the side panel.
  document.getElementById('xr-top')!.insertBefore(panelToggle('editor', 'Editor', 'Show or hide the scene editor'), document.getElementById('xr-side-toggle'));
  const editControls = () => [typeSel, urlInput, idInput, createBtn, importFile, importBtn, ...detail.querySelectorAll<HTMLInputElement>('input, select, textarea, button.write')];

  const applyRights = () => {
    const s = v.session();
    canEdit = s?.role === 'editor';
    panel.classList.toggle('read-only', !canEdit);
    banner.hidden = canEdit;
    if (!canEdit && s) {
      const who = s.signedIn ? `user ${s.username}` : `a guest (${s.displayName})`;
      const me = identity();
      banner.textContent = `Read-only: you are ${who} with the ${s.role} role in ${v.ns}/${v.scene}, so you can look but not change anything. ` +
        (me ? `Roles come from the scene's settings, not from the token: the owner of namespace ${v.ns} edits, and lists editors in the settings (docs/protocol.md, "Scene settings").`
          : 'To edit, open this page with ?token=<token of a user who may edit this scene> (its namespace owner or a listed editor).');
    }
    for (const c of editControls()) (c as HTMLInputElement).disabled = !canEdit;
  };
  v.onSession(applyRights);

  const publish = async (m: Message, what: string) => {
    if (!canEdit) {
      toast(READ_ONLY, 'error');
      throw new Error('read-only');
    }
    try {
      await v.publishObject(m);
    } catch (e) {
      toast(`${what} failed: ${(e as Error).message}`, 'error');
      throw e;
    }
  };

  /**
   * Publishes the detail's edit. The bus may echo it before the publish
   * resolves, and the echo is to draw the detail anew, so the fields stop
   * counting as changed first, and again if it was not sent.
   */
  const sendEdit = async (m: Message, what: string) => {
    const was = touched;
    touched = new Set();
    try {
      await publish(m, what);
    } catch (e) {
      touched = was;
      throw e;
    }
  };

  // --- tree
  const renderTree = () => {
    const objs = [...v.model.objects.values()];
    const ids = new Set(objs.map((o) => o.id));
    const kids = new Map<string | undefined, SceneObject[]>();
    for (const o of objs) {
      const p = parentOf(o.data);
      const key = p && ids.has(p) ? p : undefined;
      (kids.get(key) ?? kids.set(key, []).get(key)!).push(o);
    }
    const seen = new Set<string>();
    const children = (parent: string | undefined) =>
      (kids.get(parent) ?? []).sort((a, b) => a.id.localeCompare(b.id)).filter((o) => !seen.has(o.id));
    const item = (o: SceneObject, sub: HTMLElement[]) => {
      const kind = o.type === 'object' ? String(o.data.object_type ?? 'entity') : o.type;
      return h('li', { 'data-tree-id': o.id },
        h('button', { type: 'button', class: 'tree-item' + (o.id === selected ? ' selected' : ''), onclick: () => select(o.id) },
          o.id, h('small', {}, ` ${kind}`)),
        sub.length ? h('ul', {}, ...sub) : null);
    };
    // Nested as the scene down to MAX_DEPTH; the objects below are listed
    // in one list under their ancestor at that depth (lists nested
    // thousands deep would overflow the stack, and not fit the panel).
    const below = (parent: string): HTMLElement[] => {
      const out: HTMLElement[] = [];
      const todo = children(parent).reverse();
      while (todo.length) {
        const o = todo.pop()!;
        if (seen.has(o.id)) continue;
        seen.add(o.id);
        out.push(item(o, []));
        const kids = children(o.id);
        for (let i = kids.length - 1; i >= 0; i--) todo.push(kids[i]);
      }
      return out;
    };
    const build = (parent: string | undefined, depth: number): HTMLElement[] =>
      children(parent).map((o) => {
        seen.add(o.id);
        return item(o, depth + 1 < MAX_DEPTH ? build(o.id, depth + 1) : below(o.id));
      });
    const items = build(undefined, 0);
    const focused = (document.activeElement as HTMLElement | null)?.closest?.('#xr-tree [data-tree-id]')?.getAttribute('data-tree-id');
    tree.replaceChildren(...(items.length ? items : [h('li', { class: 'hint' }, 'No objects yet.')]));
    // redrawn while someone tabs through it: the focus stays on its item
    if (focused) (tree.querySelector(`[data-tree-id="${CSS.escape(focused)}"] > .tree-item`) as HTMLElement | null)?.focus();
  };

  // --- detail
  // step 'any': with a step, the browser would refuse values off the grid the current value starts.
  const num = (id: string, value: number) => h('input', { id, type: 'number', step: 'any', value: String(r3(value)), class: 'num' });
  const vecRow = (label: string, key: string, val: { x: number; y: number; z: number }) =>
    h('label', { class: 'vec' }, h('span', {}, label), num(`f-${key}-x`, val.x), num(`f-${key}-y`, val.y), num(`f-${key}-z`, val.z));
  const readVec = (key: string) => ({
    x: Number((detail.querySelector(`#f-${key}-x`) as HTMLInputElement).value) || 0,
    y: Number((detail.querySelector(`#f-${key}-y`) as HTMLInputElement).value) || 0,
    z: Number((detail.querySelector(`#f-${key}-z`) as HTMLInputElement).value) || 0,
  });

  const renderDetail = () => {
    touched = new Set();
    const o = selected ? v.model.objects.get(selected) : undefined;
    if (!o) {
      detail.replaceChildren(h('p', { class: 'hint' }, selected ? `${selected} was deleted.` : 'Select an object.'));
      return;
    }
    const d = o.data;
    const kind = typeof d.object_type === 'string' ? d.object_type : '';
    const mat = isObject(d.material) ? d.material : {};
    const light = isObject(d.light) ? d.light : d;
    const colorNow = kind === 'text' ? d.color : kind === 'light' ? light.color : mat.color ?? d.color;
    // the colour input takes #rrggbb only: #rgb is widened; another form
    // (a name, rgba()) shows grey and is left alone unless changed
    const known = hexColor(colorNow);
    const color = known ?? '#cccccc';
    const opacity = typeof mat.opacity === 'number' ? mat.opacity : 1;
    const pos = isObject(d.position) ? { x: Number(d.position.x) || 0, y: Number(d.position.y) || 0, z: Number(d.position.z) || 0 } : { x: 0, y: 0, z: 0 };
    const scale = isObject(d.scale) ? { x: Number(d.scale.x ?? 1), y: Number(d.scale.y ?? 1), z: Number(d.scale.z ?? 1) } : { x: 1, y: 1, z: 1 };
    const rot = rotationDegrees(d.rotation);
    const inside = new Set(descendants(o.id, v.model.objects.values()));
    const others = [...v.model.objects.keys()].filter((x) => x !== o.id && !inside.has(x)).sort();
    const parentSel = h('select', { id: 'f-parent' }, h('option', { value: '' }, '(scene root)'),
      ...others.map((x) => h('option', { value: x, selected: parentOf(d) === x }, x)));
    const textValue = typeof d.value === 'string' ? d.value : typeof d.text === 'string' ? d.text : '';
    const jsonArea = h('textarea', { id: 'f-json', rows: 12, spellcheck: false }) as HTMLTextAreaElement;
    jsonArea.value = JSON.stringify({ object_id: o.id, type: o.type, data: d }, null, 2);
    const jsonErr = h('p', { id: 'f-json-error', class: 'error', hidden: true });
    const delBtn = h('button', { id: 'f-delete', type: 'button', class: 'write danger' }, 'Delete');
    const n = inside.size;
    let armed: ReturnType<typeof setTimeout> | null = null;
    delBtn.addEventListener('click', guard(async () => {
      if (!armed) {
        delBtn.textContent = n ? `Delete ${o.id} and ${n} child object${n > 1 ? 's' : ''}? Click again` : `Delete ${o.id}? Click again`;
        armed = setTimeout(() => { armed = null; delBtn.textContent = 'Delete'; }, 4000);
        return;
      }
      clearTimeout(armed);
      armed = null;
      await publish({ object_id: o.id, action: 'delete', persist: true }, 'Delete');
      toast(`Deleted ${o.id}${n ? ` and ${n} child object${n > 1 ? 's' : ''}` : ''}.`);
    }));

    const form = h('form', { id: 'f-form' },
      h('p', {}, h('b', {}, o.id), ` · ${o.type}${kind ? ' · ' + kind : ''}`),
      o.type === 'object' ? h('div', {},
        h('label', {}, h('span', {}, 'parent'), parentSel),
        vecRow('position', 'position', pos),
        vecRow('rotation°', 'rotation', rot),
        vecRow('scale', 'scale', scale),
        h('label', {}, h('span', {}, 'color'), h('input', { id: 'f-color', type: 'color', value: color })),
        kind !== 'text' && kind !== 'light' && kind !== 'gltf-model' && kind !== 'entity'
          ? h('label', {}, h('span', {}, 'opacity'), num('f-opacity', opacity)) : null,
        kind === 'gltf-model' || kind === 'image'
          ? h('label', {}, h('span', {}, 'url'), h('input', { id: 'f-url', value: typeof d.url === 'string' ? d.url : '', size: 24 })) : null,
        kind === 'text' ? h('label', {}, h('span', {}, 'text'), h('input', { id: 'f-text', value: textValue, size: 24 })) : null,
        h('label', {}, h('span', {}, 'click-listener'), h('input', { id: 'f-click', type: 'checkbox', checked: d['click-listener'] !== undefined && d['click-listener'] !== false })),
        h('div', { class: 'row' }, h('button', { id: 'f-apply', type: 'submit', class: 'write' }, 'Apply')),
      ) : h('p', { class: 'hint' }, 'Not a scene object: edit it as JSON.'),
    );
    form.addEventListener('submit', guard(async (e) => {
      e.preventDefault();
      // Only the fields the user changed: another user or a program may
      // have changed the others since the form was drawn.
      const t = (id: string) => touched.has(id);
      const now = v.model.objects.get(o.id)?.data ?? d;
      const delta: JsonObject = {};
      // position and scale: the axes typed, the others as the object has them now
      for (const [key, dflt] of [['position', 0], ['scale', 1]] as const) {
        const axes = (['x', 'y', 'z'] as const).filter((a) => t(`f-${key}-${a}`));
        if (!axes.length) continue;
        const cur = isObject(now[key]) ? now[key] : {};
        const typed = readVec(key);
        delta[key] = Object.fromEntries((['x', 'y', 'z'] as const).map((a) => [a, axes.includes(a) ? typed[a] : typeof cur[a] === 'number' ? cur[a] : dflt]));
      }
      if (['x', 'y', 'z'].some((a) => t(`f-rotation-${a}`))) delta.rotation = { ...readVec('rotation'), w: null };
      if (t('f-parent')) delta.parent = parentSel.value || null;
      if (t('f-click')) delta['click-listener'] = (detail.querySelector('#f-click') as HTMLInputElement).checked ? true : null;
      const c = t('f-color') ? (detail.querySelector('#f-color') as HTMLInputElement).value : undefined;
      if (kind === 'text') {
        if (c) delta.color = c;
      } else if (kind === 'light') {
        if (c && isObject(d.light)) delta.light = { color: c };
        else if (c) delta.color = c;
      } else if (kind !== 'gltf-model' && kind !== 'entity') {
        const m: JsonObject = {};
        const op = detail.querySelector('#f-opacity') as HTMLInputElement | null;
        if (op && t('f-opacity')) {
          const opv = Math.min(1, Math.max(0, Number(op.value)));
          m.opacity = opv;
          m.transparent = opv < 1;
        }
        if (c) {
          m.color = c;
          if (typeof now.color === 'string') delta.color = null;
        }
        if (Object.keys(m).length) delta.material = m;
      }
      const url = detail.querySelector('#f-url') as HTMLInputElement | null;
      if (url && t('f-url')) delta.url = url.value.trim();
      const text = detail.querySelector('#f-text') as HTMLInputElement | null;
      if (text && t('f-text')) {
        if (typeof now.text === 'string') delta.text = text.value;
        else delta.value = text.value;
      }
      if (Object.keys(delta).length === 0) {
        toast('Nothing to apply: no field was changed.');
        return;
      }
      await sendEdit({ object_id: o.id, action: 'update', type: o.type, persist: true, data: delta }, 'Update');
    }));

    const applyJson = h('button', { id: 'f-apply-json', type: 'button', class: 'write' }, 'Apply JSON');
    applyJson.addEventListener('click', guard(async () => {
      let parsed;
      try {
        parsed = parseObjectJSON(jsonArea.value);
        const p = parentOf(parsed.data);
        if (p && descendants(parsed.object_id, v.model.objects.values()).includes(p)) throw new ProtocolError('the parent is a descendant of the object');
      } catch (err) {
        jsonErr.textContent = (err as Error).message;
        jsonErr.hidden = false;
        return;
      }
      jsonErr.hidden = true;
      // create replaces the stored object (an upsert), so the JSON is the whole object.
      await sendEdit({ object_id: parsed.object_id, action: 'create', type: parsed.type, persist: true, data: parsed.data }, 'Save');
      if (parsed.object_id !== o.id) pendingSelect = parsed.object_id;
    }));
    const dupBtn = h('button', { id: 'f-duplicate', type: 'button', class: 'write' }, 'Duplicate');
    dupBtn.addEventListener('click', guard(() => duplicate(o.id)));

    const stale = h('p', { id: 'f-stale', class: 'stale', role: 'status', hidden: true },
      `${o.id} changed since you began editing it. Apply sends the fields you changed; the others keep the new values. `,
      h('button', { type: 'button', onclick: () => renderDetail() }, 'Show theirs'));
    // the element with the focus is drawn anew: it gets the focus back
    const focused = detail.contains(document.activeElement) ? document.activeElement?.id : undefined;
    detail.replaceChildren(stale, form,
      h('details', { open: true }, h('summary', {}, 'Raw JSON'), jsonArea, jsonErr, h('div', { class: 'row' }, applyJson)),
      h('div', { class: 'row' }, dupBtn, delBtn));
    if (!canEdit) for (const c of detail.querySelectorAll<HTMLInputElement>('input, select, textarea, button.write')) c.disabled = true;
    if (focused) (detail.querySelector(`#${CSS.escape(focused)}`) as HTMLElement | null)?.focus();
  };
  for (const ev of ['input', 'change']) {
    detail.addEventListener(ev, (e) => {
      const id = (e.target as HTMLElement).id;
      if (id?.startsWith('f-')) touched.add(id);
    });
  }

  const select = (id: string | null) => {
    selected = id;
    renderTree();
    renderDetail();
  };

  // --- actions
  const duplicate = async (id: string) => {
    const all = [id, ...descendants(id, v.model.objects.values())];
    const suffix = randomSuffix(4);
    const map = new Map(all.map((x) => [x, `${x}-copy-${suffix}`]));
    const copies = all.map((x) => {
      const o = v.model.objects.get(x)!;
      const data = structuredClone(o.data);
      const p = parentOf(data);
      if (p && map.has(p)) data.parent = map.get(p)!;
      if (x === id && isObject(data.position)) data.position = { ...data.position, x: r3((Number(data.position.x) || 0) + 0.6) };
      return { object_id: map.get(x)!, type: o.type, data, parent: parentOf(data) };
    });
    for (const c of parentsFirst(copies)) {
      await publish({ object_id: c.object_id, action: 'create', type: c.type, persist: true, data: c.data }, 'Duplicate');
    }
    pendingSelect = map.get(id)!;
    toast(`Duplicated ${id}${all.length > 1 ? ` with ${all.length - 1} child object(s)` : ''}.`);
  };

  createForm.addEventListener('submit', guard(async (e) => {
    e.preventDefault();
    const kind = typeSel.value;
    const url = urlInput.value.trim();
    if ((kind === 'gltf-model' || kind === 'image') && !url) {
      toast(`A ${kind} needs a URL.`, 'error');
      urlInput.focus();
      return;
    }
    const id = idInput.value.trim() || `${kind}_${randomSuffix(4)}`;
    if (!validId(id)) {
      toast('The id may not contain "/", "+", "#" or spaces.', 'error');
      return;
    }
    if (v.model.objects.has(id)) {
      toast(`An object ${id} exists already.`, 'error');
      return;
    }
    // In front of the camera, 3 m away.
    const p = v.presence['pos'];
    const q = v.presence['quat'];
    const fwd = { x: -2 * (q.x * q.z + q.w * q.y), z: -(1 - 2 * (q.x * q.x + q.y * q.y)) };
    const len = Math.hypot(fwd.x, fwd.z) || 1;
    const data = defaultsFor(kind, url);
    data.position = { x: r3(p.x + (3 * fwd.x) / len), y: r3(Math.max(0.5, p.y - 0.3)), z: r3(p.z + (3 * fwd.z) / len) };
    if (kind !== 'light' && kind !== 'entity') data['click-listener'] = true;
    pendingSelect = id;
    await publish({ object_id: id, action: 'create', type: 'object', persist: true, data }, 'Create');
    idInput.value = '';
    toast(`Created ${id}.`);
  }));

  exportBtn.addEventListener('click', guard(async () => {
    const s = v.session();
    try {
      const objs = await persistGet<StoredObject[]>(`${encodeURIComponent(v.ns)}/${encodeURIComponent(v.scene)}`, s?.token ?? null);
      const out = objs.map((o) => ({ object_id: o.object_id, type: o.type, attributes: o.attributes }));
      const blob = new Blob([JSON.stringify(out, null, 2)], { type: 'application/json' });
      const a = h('a', { href: URL.createObjectURL(blob), download: `${v.ns}-${v.scene}.json` });
      document.body.appendChild(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(a.href), 10_000);
    } catch (e) {
      toast(`Export failed: ${(e as Error).message}`, 'error');
    }
  }));

  importBtn.addEventListener('click', guard(async () => {
    const f = importFile.files?.[0];
    if (!f) {
      toast('Choose a JSON file first.', 'error');
      return;
    }
    let objs;
    try {
      objs = parseImport(await f.text());
    } catch (e) {
      toast(`Import refused: ${(e as Error).message}`, 'error');
      return;
    }
    if (!canEdit) {
      toast(READ_ONLY, 'error');
      return;
    }
    let n;
    try {
      n = await storeImport(objs, (o) => v.publishObject({ object_id: o.object_id, action: 'create', type: o.type, persist: true, data: o.data }));
    } catch (e) {
      toast(`Import failed: ${(e as Error).message}. Importing the file again stores them all (a create replaces an object).`, 'error');
      return;
    }
    importFile.value = '';
    toast(`Imported ${n} object${n === 1 ? '' : 's'}.`);
  }));

  // --- follow the model
  let scheduled = false;
  let detailDirty = false;
  v.model.on((e) => {
    if (e.kind === 'set' && pendingSelect === e.obj.id) {
      pendingSelect = null;
      selected = e.obj.id;
      detailDirty = true;
    }
    if (e.kind === 'reset' || (e.kind === 'set' ? e.obj.id === selected : e.id === selected)) detailDirty = true;
    if (scheduled) return;
    scheduled = true;
    queueMicrotask(() => {
      scheduled = false;
      renderTree();
      if (detailDirty || !detail.querySelector('#f-form')) {
        const stale = detail.querySelector('#f-stale') as HTMLElement | null;
        // what the user typed stays; the note says the object changed
        if (touched.size && stale && selected && v.model.objects.has(selected)) stale.hidden = false;
        else renderDetail();
      }
      detailDirty = false;
    });
  });
  // In the editor every object can be picked in the 3D view.
  v.sceneEl.setAttribute('raycaster', 'objects: [data-object-id]; far: 200');
  v.sceneEl.addEventListener('click', (e) => {
    const id = (e.target as HTMLElement)?.dataset?.objectId;
    if (id && v.model.objects.has(id)) select(id);
  });
  applyRights();
  renderTree();
}
