// Which objects wait for which parent. The renderer keeps an object whose
// parent is not drawn out of the document (among its orphans) until the
// parent is; when the parent is drawn, it asks here for the objects
// waiting for it, at a cost that grows with their number only, not with
// the number of objects waiting in the scene.

/** Objects waiting for a parent, by the parent's id. Each waits for one parent at most. */
export class ParentWaits {
  private byParent = new Map<string, Set<string>>();
  private parents = new Map<string, string>();

  /** From now on id waits for parent; with parent undefined, for none. */
  set(id: string, parent: string | undefined) {
    const cur = this.parents.get(id);
    if (cur === parent) return;
    if (cur !== undefined) {
      const ids = this.byParent.get(cur)!;
      ids.delete(id);
      if (ids.size === 0) this.byParent.delete(cur);
      this.parents.delete(id);
    }
    if (parent !== undefined) {
      let ids = this.byParent.get(parent);
      if (!ids) this.byParent.set(parent, (ids = new Set()));
      ids.add(id);
      this.parents.set(id, parent);
    }
  }

  /** The parent id waits for, or undefined. */
  parentOf(id: string): string | undefined {
    return this.parents.get(id);
  }

  /** Whether any id waits for parent. */
  waitedFor(parent: string): boolean {
    return this.byParent.has(parent);
  }

  /** The ids waiting for parent, in the order they began to wait; they wait no more. */
  take(parent: string): string[] {
    const ids = this.byParent.get(parent);
    if (!ids) return [];
    this.byParent.delete(parent);
    for (const id of ids) this.parents.delete(id);
    return [...ids];
  }

  /** How many objects wait. */
  get size(): number {
    return this.parents.size;
  }
}
