// Small DOM helpers. Text from the bus is always set as text, never as HTML.

type Attrs = Record<string, string | number | boolean | ((e: Event) => void) | undefined>;

export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K, attrs: Attrs = {}, ...children: (Node | string | null | undefined | false)[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === false) continue;
    if (typeof v === 'function') el.addEventListener(k.replace(/^on/, ''), v);
    else if (k === 'class') el.className = String(v);
    else if (k in el && typeof v !== 'string') (el as any)[k] = v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children) if (c !== null && c !== undefined && c !== false) el.append(c);
  return el;
}

/** The column at the top of the page that holds the error banner and notices. */
function banners(): HTMLElement {
  let b = document.getElementById('xr-banners');
  if (!b) {
    b = h('div', { id: 'xr-banners' });
    document.body.appendChild(b);
  }
  return b;
}

/** A message in the error banner at the top of the page. */
export function showError(msg: string, actions: { label: string; run: () => void }[] = []) {
  let box = document.getElementById('xr-error');
  if (!box) {
    box = h('div', { id: 'xr-error', role: 'alert' });
    banners().prepend(box);
  }
  box.replaceChildren(h('span', {}, msg), ...actions.map((a) => h('button', { onclick: a.run }, a.label)));
  box.hidden = false;
}

/**
 * A message under the error banner that stays until the user dismisses it
 * (clearError leaves it): for what the user did that the page could not
 * do, such as a ?token= that was not used.
 */
export function showNotice(msg: string) {
  let box = document.getElementById('xr-notice');
  if (!box) {
    box = h('div', { id: 'xr-notice', role: 'status' });
    banners().append(box);
  }
  box.replaceChildren(h('span', {}, msg), h('button', { onclick: () => (box!.hidden = true) }, 'Dismiss'));
  box.hidden = false;
}

export function clearError() {
  const box = document.getElementById('xr-error');
  if (box) box.hidden = true;
}

/** A short message that goes away by itself. */
export function toast(msg: string, kind: 'info' | 'error' = 'info') {
  let box = document.getElementById('xr-toasts');
  if (!box) {
    box = h('div', { id: 'xr-toasts' });
    document.body.appendChild(box);
  }
  const t = h('div', { class: `toast ${kind}` }, msg);
  box.appendChild(t);
  setTimeout(() => t.remove(), kind === 'error' ? 8000 : 3500);
}

/** A phone held upright: panels start hidden, span the width, and show one at a time. */
export const NARROW_SCREEN = '(max-width: 450px)';
const panels: { name: string; button: HTMLButtonElement }[] = [];

/**
 * A top-bar button that shows and hides a panel: the class `${name}-hidden`
 * on the body hides it (style.css). The panel starts hidden on a narrow
 * screen, where showing it hides the other panels, since each spans the
 * width there.
 */
export function panelToggle(name: string, label: string, title: string): HTMLButtonElement {
  const button = h('button', { id: `xr-${name}-toggle`, class: 'panel-toggle', title,
    onclick: () => {
      const on = button.getAttribute('aria-pressed') !== 'true';
      for (const p of panels) if (p.button === button || (on && matchMedia(NARROW_SCREEN).matches)) showPanel(p, p.button === button && on);
    } }, label);
  const p = { name, button };
  panels.push(p);
  showPanel(p, !matchMedia(NARROW_SCREEN).matches);
  return button;
}

function showPanel(p: { name: string; button: HTMLButtonElement }, on: boolean) {
  document.body.classList.toggle(`${p.name}-hidden`, !on);
  p.button.setAttribute('aria-pressed', String(on));
}

/**
 * Leaves the keys to walking. A-Frame's WASD controls walk only while no
 * element has the focus, so after a mouse click on a button (Panel,
 * Microphone, a tree item) W did nothing until the user clicked the 3D
 * view. A click with the mouse or a tap now leaves no focus behind on a
 * button or link; one made with the keyboard (Enter or Space: detail 0)
 * keeps it there. Escape in a text field leaves it, keeping what was typed.
 */
export function keysToWalking() {
  document.addEventListener('click', (e) => {
    if (e.detail === 0) return;
    const el = (e.target as Element | null)?.closest?.('button, a[href], summary');
    if (el && el === document.activeElement) (el as HTMLElement).blur();
  });
  document.addEventListener('keydown', (e) => {
    const el = e.target as HTMLElement | null;
    if (e.key !== 'Escape' || e.defaultPrevented || !el?.matches?.('input, textarea, select')) return;
    el.blur();
  });
}
