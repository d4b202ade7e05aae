import { RollCallError, errorOf } from "./errors.js";

/** How available each status is: a hidden tab never makes a session more available than it is. */
const AVAILABILITY = { online: 3, busy: 2, away: 1, offline: 0, invisible: -1 };

/** A presence session, from `rc.online()`. */
export class Session {
  #rc;
  #waiters = [];
  #hidden = null;
  #resolveGranted;
  #rejectGranted;
  #ended = null;
  #endedWaiters = [];

  constructor(rc, machine) {
    this.#rc = rc;
    /** @internal */
    this.machine = machine;
    this.granted = new Promise((resolve, reject) => {
      this.#resolveGranted = () => resolve(this);
      this.#rejectGranted = reject;
    });
    this.granted.catch(() => {});
  }

  get user() {
    return this.machine.user;
  }

  /** The broker's session token, once granted (it changes when the session is opened again after it ended). */
  get id() {
    return this.machine.session;
  }

  /** The status asked for last. */
  get status() {
    return this.machine.desired.status;
  }

  /** Whether the broker holds a change for this session (`afterMs`) that it has not published. */
  get held() {
    return this.machine.held;
  }

  /** Sets the status (and text): sent at once, or when the connection is back. With `afterMs`, the broker holds it
   * and publishes it only if no other status follows within that time. Resolves once the broker took it
   * (`{held}`), rejects if it refused it. */
  setStatus(status, { text = null, afterMs } = {}) {
    // Asked by the app while the tab is hidden: that is the status to come back to, not the one before.
    if (this.#hidden && afterMs === undefined) this.#hidden = { status, text };
    return this.#set(status, text, afterMs);
  }

  #set(status, text, afterMs) {
    if (this.#ended) return Promise.reject(new RollCallError("closed", "the session has ended"));
    const version = this.machine.setStatus(status, text, afterMs, this.#rc._clockNow());
    const done = new Promise((resolve, reject) => this.#waiters.push({ version, resolve, reject }));
    done.catch(() => {});
    this.#rc._pump();
    return done;
  }

  /** Ends the session (bye). */
  bye() {
    if (this.#ended) return Promise.resolve();
    const done = new Promise((resolve) => this.#endedWaiters.push(resolve));
    this.machine.close();
    this.#rc._pump();
    return done;
  }

  /** @internal: tab hidden: the held status, unless already hidden, or unless the session is less available than
   * that already (an `invisible` or `offline` session made `away` would show the user to everyone). */
  _hide(status, afterMs) {
    if (this.#hidden || this.#ended) return;
    if (AVAILABILITY[this.machine.desired.status] <= AVAILABILITY[status]) return;
    this.#hidden = { status: this.machine.desired.status, text: this.machine.desired.text };
    this.#set(status, status === "offline" ? null : this.#hidden.text, afterMs);
  }

  /** @internal: tab shown again: back to the status before, which cancels a held change at the broker. */
  _show() {
    if (!this.#hidden || this.#ended) return;
    const { status, text } = this.#hidden;
    this.#hidden = null;
    this.#set(status, text);
  }

  /** @internal: `pagehide`: bye now, without waiting for anything under way. */
  _byeNow() {
    if (this.#ended) return;
    if (this.machine.session && this.machine.connected && !this.machine.needsHello) {
      this.#rc._sendNow({ op: "bye", session: this.machine.session });
    }
    this.bye();
  }

  /** @internal: the client cannot connect (unauthorized): a session not granted yet fails with why, and ends (its
   * `online()` was rejected: it must not say hello later, behind the app's back). Returns whether it ended. */
  _refused(error) {
    if (this.machine.session || this.#ended) return false;
    this.machine.phase = "closed";
    this._ended(error, true);
    return true;
  }

  /** @internal */
  _event(event) {
    if (event.type === "granted" && event.first) this.#resolveGranted();
    if (event.type === "acked") {
      this.#settle(event.version, (waiter) => waiter.resolve({ held: event.held }));
    } else if (event.type === "refused") {
      const error = errorOf({ error: event.error });
      this.#rc._error(error);
      if (event.version > 0) this.#settle(event.version, (waiter) => waiter.reject(error));
    }
  }

  /** @internal */
  _ended(error, first) {
    if (this.#ended) return;
    this.#ended = error ?? true;
    const why = error ?? new RollCallError("closed", "the session has ended");
    if (first || !this.machine.session) this.#rejectGranted(why);
    else if (error) this.#rc._error(error);
    for (const waiter of this.#waiters.splice(0)) waiter.reject(why);
    for (const resolve of this.#endedWaiters.splice(0)) resolve();
  }

  #settle(version, fn) {
    const done = this.#waiters.filter((waiter) => waiter.version <= version);
    this.#waiters = this.#waiters.filter((waiter) => waiter.version > version);
    for (const waiter of done) fn(waiter);
  }
}
