import { callSafely } from "./errors.js";

/**
 * The latest record of every followed user and the latest view of every followed group, for UI code: read it with
 * `get(user)` and `group(id)`, and hear of every change with `subscribe(fn)`. Records and group views are replaced,
 * never changed in place, so a UI can compare them by identity (React's `useSyncExternalStore`).
 */
export class Store {
  #records = new Map();
  #groups = new Map();
  #listeners = new Set();
  #version = 0;
  #batching = 0;
  #users = new Set();
  #groupIds = new Set();

  /** The latest record of `user` (followed, or a member of a followed group), or undefined. */
  get(user) {
    return this.#records.get(user);
  }

  /** The latest view of group `id`: `{group, online, total, counts, members: {user: record}, seq}`, or undefined. */
  group(id) {
    return this.#groups.get(id);
  }

  /** Every record held, by user id. */
  users() {
    return new Map(this.#records);
  }

  /** A number that changes with every change: a cheap snapshot for `useSyncExternalStore`. */
  get version() {
    return this.#version;
  }

  /** Calls `fn({users, groups})` after each change, with the ids of the users and groups that changed: once per
   * update, query answer or group read, however many records it brought. Returns the function that stops it. */
  subscribe(fn) {
    this.#listeners.add(fn);
    return () => {
      this.#listeners.delete(fn);
    };
  }

  /** @internal: the changes `fn` makes are told to subscribers once, at its end. */
  batch(fn) {
    this.#batching += 1;
    try {
      return fn();
    } finally {
      this.#batching -= 1;
      if (this.#batching === 0) this.#flush();
    }
  }

  /** @internal */
  setRecord(record) {
    this.#records.set(record.user, record);
    this.#changed({ user: record.user });
  }

  /** @internal */
  deleteRecord(user) {
    if (this.#records.delete(user)) this.#changed({ user });
  }

  /** @internal */
  setGroup(view) {
    this.#groups.set(view.group, view);
    this.#changed({ group: view.group });
  }

  /** @internal */
  deleteGroup(id) {
    if (this.#groups.delete(id)) this.#changed({ group: id });
  }

  #changed({ user, group }) {
    this.#version += 1;
    if (user !== undefined) this.#users.add(user);
    if (group !== undefined) this.#groupIds.add(group);
    if (this.#batching === 0) this.#flush();
  }

  #flush() {
    if (this.#users.size === 0 && this.#groupIds.size === 0) return;
    const change = { users: [...this.#users], groups: [...this.#groupIds] };
    this.#users.clear();
    this.#groupIds.clear();
    for (const fn of [...this.#listeners]) callSafely(fn, change);
  }
}
