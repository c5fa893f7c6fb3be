// A small stand-in for the document, for unit tests in Node of code that
// arranges elements (the renderer's entity tree): elements with a parent,
// children, dataset and attributes, and a document whose connected tree is
// the one under the element made by connectedRoot(). It throws where the
// DOM throws (an element appended into itself or its own descendant, the
// removal of an element that is not a child).

/** One element: what the renderer reads and changes of an HTMLElement. */
export class FakeElement {
  readonly children: FakeElement[] = [];
  parentNode: FakeElement | null = null;
  readonly dataset: Record<string, string | undefined> = {};
  readonly attributes = new Map<string, unknown>();
  private classes = new Set<string>();
  /** The document's own top: elements under it are connected. */
  connectedTop = false;

  constructor(readonly tagName: string) {}

  get parentElement(): FakeElement | null {
    return this.parentNode;
  }

  get firstElementChild(): FakeElement | null {
    return this.children[0] ?? null;
  }

  get isConnected(): boolean {
    let x: FakeElement = this;
    while (x.parentNode) x = x.parentNode;
    return x.connectedTop;
  }

  contains(other: FakeElement | null): boolean {
    for (let x = other; x; x = x.parentNode) if (x === this) return true;
    return false;
  }

  appendChild(c: FakeElement): FakeElement {
    if (c.contains(this)) throw new Error(`HierarchyRequestError: ${c.dataset.objectId} would be inside itself`);
    c.parentNode?.removeChild(c);
    this.children.push(c);
    c.parentNode = this;
    return c;
  }

  removeChild(c: FakeElement): FakeElement {
    const i = this.children.indexOf(c);
    if (i < 0) throw new Error('NotFoundError: not a child');
    this.children.splice(i, 1);
    c.parentNode = null;
    return c;
  }

  remove() {
    this.parentNode?.removeChild(this);
  }

  setAttribute(name: string, value: unknown) {
    this.attributes.set(name, value);
  }

  getAttribute(name: string): unknown {
    return this.attributes.get(name);
  }

  removeAttribute(name: string) {
    this.attributes.delete(name);
  }

  readonly classList = {
    toggle: (name: string, on: boolean) => {
      if (on) this.classes.add(name);
      else this.classes.delete(name);
      return on;
    },
    contains: (name: string) => this.classes.has(name),
  };
}

/** Installs a document that makes FakeElements as globalThis.document, and returns a connected element to draw in. */
export function fakeDocument(): HTMLElement {
  const doc = { createElement: (tag: string) => new FakeElement(tag), activeElement: null };
  (globalThis as { document?: unknown }).document = doc;
  const top = new FakeElement('a-scene');
  top.connectedTop = true;
  const root = new FakeElement('a-entity');
  top.appendChild(root);
  return root as unknown as HTMLElement;
}
