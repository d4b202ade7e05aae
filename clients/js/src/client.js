import { Backoff } from "./backoff.js";
import { ConnectionMachine } from "./connection.js";
import { RollCallError, callSafely, errorOf } from "./errors.js";
import { watchLifecycle } from "./lifecycle.js";
import { SessionMachine } from "./session.js";
import { Session } from "./session-handle.js";
import { Store } from "./store.js";
import { tokenExpiry } from "./token.js";
import { WatchMachine, groupOf, userOf } from "./watch.js";

const realClock = {
  now: () => Date.now(),
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (handle) => clearTimeout(handle),
};

/** A resumed `subscribe` refused with these is sent again without `after`: the log cannot continue from there. */
const RESUME_REFUSALS = new Set(["snapshot_required", "no_history"]);

/** Topics per `subscribe` request (the broker's default cap per connection is 1,000). */
const SUBSCRIBE_CHUNK = 500;

/**
 * A RollCall client over one WebSocket: sessions (`online`), follows of users and groups, queries. The shell around
 * three machines (connection.js, session.js, watch.js): it owns the socket, the one timer and the pending replies,
 * and carries out what the machines decide.
 */
export class RollCall {
  #url;
  #token;
  #getToken;
  #WebSocket;
  #clock;
  #fetch;
  #requestTimeoutMs;
  #conn;
  #watch;
  #sessions = new Set();
  #pending = new Map();
  #waiting = [];
  #nextId = 1;
  #ws = null;
  #wsOpened = false;
  #ready = false;
  #tokenExp = null;
  #timer = null;
  #listeners = { state: new Set(), broker: new Set(), error: new Set() };
  #userFns = new Map();
  #groupFns = new Map();
  #lastState = null;
  #brokerOffset = 0;
  #detach = [];
  #closing = null;
  /** getToken calls under way, with their deadline timers. */
  #tokenAsks = new Set();
  /** Sessions ended by the app while the connection was down: their bye is said on the next connection. */
  #owedByes = [];
  /** Topics the broker refused on this connection (an invalid id, past its cap): left out of the reads. */
  #refusedTopics = new Set();
  /** A token that looked expired by this clock was asked for again once: the next one is tried anyway. */
  #expiredOnce = false;

  /**
   * @param {string} url `ws://HOST:PORT/v1/ws` or `wss://...`
   * @param {object} [options] see index.d.ts
   */
  constructor(url, options = {}) {
    this.#url = url;
    this.#token = options.token;
    this.#getToken = options.getToken;
    this.#WebSocket = options.WebSocket ?? globalThis.WebSocket;
    if (typeof this.#WebSocket !== "function") {
      throw new TypeError("RollCall: no WebSocket (Node 20 needs --experimental-websocket, or pass options.WebSocket)");
    }
    this.#clock = options.clock ?? realClock;
    this.#fetch = options.fetch ?? globalThis.fetch?.bind(globalThis);
    this.#requestTimeoutMs = options.requestTimeoutMs ?? 10000;
    /** The latest record of every followed user and group, for UI code. */
    this.store = new Store();
    this.#conn = new ConnectionMachine({
      backoff: new Backoff(options.backoff),
      canRefreshToken: typeof this.#getToken === "function",
    });
    this.#watch = new WatchMachine(this.store);
    const win = globalThis.window;
    if (win?.addEventListener && options.reconnectOnOnline !== false) {
      const online = () => this.reconnectNow();
      win.addEventListener("online", online);
      this.#detach.push(() => win.removeEventListener("online", online));
    }
    if (options.lifecycle) this.#detach.push(watchLifecycle(this, options.lifecycle === true ? {} : options.lifecycle));
    queueMicrotask(() => this.#run(this.#conn.start()));
  }

  /** "connecting" | "connected" | "reconnecting" | "closed" */
  get state() {
    return this.#conn.state === "idle" ? "connecting" : this.#conn.state;
  }

  /** Why the last attempt failed, or why the client is closed (`unauthorized`, `token_expired`); null otherwise. */
  get error() {
    const error = this.#conn.error;
    return error ? new RollCallError(error.code, error.message) : null;
  }

  /** The sessions opened with `online` and not yet ended. */
  get sessions() {
    return [...this.#sessions];
  }

  /** The broker's clock now, estimated from its last heartbeat or ping (for "last seen 5 min ago"). */
  now() {
    return this.#clock.now() + this.#brokerOffset;
  }

  /** Listen to "state" (state, error), "broker" (heartbeat, or {lost: true}) or "error" (a RollCallError from
   * something nobody awaits: a refused status or subscription, a failed token refresh). Returns `off`. */
  on(event, fn) {
    const set = this.#listeners[event];
    if (!set) throw new TypeError(`RollCall.on: no event ${event}`);
    set.add(fn);
    return () => this.off(event, fn);
  }

  off(event, fn) {
    this.#listeners[event]?.delete(fn);
  }

  /** Opens a session for `user`; resolves once the broker granted it, rejects if it refused (`forbidden`...). */
  online({ user, status = "online", text = null, keepalive = "connection", device, ttlMs } = {}) {
    if (this.#closing || this.#conn.state === "closed") {
      return Promise.reject(this.error ?? new RollCallError("closed", "the client is closed"));
    }
    const machine = new SessionMachine({ user, status, text, keepalive, device, ttlMs });
    const session = new Session(this, machine);
    this.#sessions.add(session);
    if (this.#ready) machine.connectionOpened();
    this.#pump();
    return session.granted;
  }

  /** Follows users: `fn` gets each one's current record, then every change (by the seq rule). Returns `stop`:
   * `stop()` ends this follow, `stop("bob")` or `stop(["bob"])` only those users of it. */
  follow(users, fn) {
    users = [...new Set(typeof users === "string" ? [users] : users)];
    const entry = { fn, users: new Set(users) };
    for (const user of users) {
      if (!this.#userFns.has(user)) this.#userFns.set(user, new Set());
      this.#userFns.get(user).add(entry);
      // The current record first, if held already (a repeat of it from the broker is then dropped by its seq).
      const record = this.store.get(user);
      if (record) queueMicrotask(() => entry.users.has(user) && callSafely(fn, record));
    }
    this.#subscribe(this.#watch.follow(users.map((user) => `presence/${user}/`)));
    return (only) => {
      const drop = only === undefined ? [...entry.users] : (typeof only === "string" ? [only] : only).filter((u) => entry.users.has(u));
      for (const user of drop) {
        entry.users.delete(user);
        this.#userFns.get(user)?.delete(entry);
        if (this.#userFns.get(user)?.size === 0) this.#userFns.delete(user);
      }
      this.#unsubscribe(this.#watch.unfollow(drop.map((user) => `presence/${user}/`)));
    };
  }

  /** Stops every follow of these users. */
  unfollow(users) {
    for (const user of typeof users === "string" ? [users] : users) {
      const entries = this.#userFns.get(user);
      if (!entries) continue;
      this.#userFns.delete(user);
      for (const entry of entries) entry.users.delete(user);
      this.#unsubscribe(this.#watch.unfollow(Array(entries.size).fill(`presence/${user}/`)));
    }
  }

  /** Follows a group: `fn` gets its whole view first (`members`), then each message (`changed`, `removed`), by the
   * group seq rule. Returns `stop`. */
  followGroup(id, fn) {
    const entry = { fn, active: true };
    if (!this.#groupFns.has(id)) this.#groupFns.set(id, new Set());
    this.#groupFns.get(id).add(entry);
    const view = this.store.group(id);
    if (view) queueMicrotask(() => entry.active && callSafely(fn, view));
    const fresh = this.#watch.follow([`group/${id}/`]);
    this.#subscribe(fresh).then(
      () => fresh.length && this.#ready && !this.#refusedTopics.has(`group/${id}/`) && this.#readGroupReporting(id),
      () => {},
    );
    return () => {
      if (!entry.active) return;
      entry.active = false;
      this.#groupFns.get(id)?.delete(entry);
      if (this.#groupFns.get(id)?.size === 0) this.#groupFns.delete(id);
      this.#unsubscribe(this.#watch.unfollow([`group/${id}/`]));
    };
  }

  /** The current records of these users, in the order asked (each once). */
  async query(users) {
    users = [...new Set(users)];
    const records = [];
    for (let start = 0; start < users.length; ) {
      const chunk = users.slice(start, start + 1000);
      const reply = await this.#call({ op: "query", users: chunk }, { retry: true });
      const answered = reply.next ?? chunk.length;
      for (const user of chunk.slice(0, answered)) records.push(reply.presence[user]);
      start += answered;
    }
    return records;
  }

  /** The broker's id, version, epoch and clock. */
  ping() {
    return this.#call({ op: "ping" }, { retry: true });
  }

  /** Defines, edits or reads a group (`{members}` | `{add, remove}` | nothing): the broker's reply, with the
   * members of every page (the pages after the first are read with `after`). With `{after}`, that one page. */
  async group(id, edit = {}) {
    let reply = await this.#call({ op: "group", group: id, ...edit }, { retry: true });
    if (edit.after !== undefined) return reply;
    const members = { ...reply.members };
    while (reply.next) {
      reply = await this.#call({ op: "group", group: id, after: reply.next }, { retry: true });
      Object.assign(members, reply.members);
    }
    const { next: _next, ...whole } = reply;
    return { ...whole, members };
  }

  /** Deletes a group. */
  ungroup(id) {
    return this.#call({ op: "ungroup", group: id }, { retry: true });
  }

  /** Any request (`{op, ...}`), such as `advance` against a test-mode broker: the broker's reply. */
  call(request) {
    return this.#call(request, { retry: false });
  }

  /** Skips the backoff and connects now; a connection that looks up is checked with a ping (and replaced if it does
   * not answer). Called by the client itself on the browser's `online` event. */
  reconnectNow() {
    this.#run(this.#conn.reconnectNow(this.#clock.now()));
  }

  /** Says bye for every open session (waiting up to 2 s for the broker), then closes the connection. */
  close() {
    if (this.#closing) return this.#closing;
    this.#closing = (async () => {
      const ended = [...this.#sessions].map((session) => session.bye().catch(() => {}));
      let timer;
      await Promise.race([Promise.all(ended), new Promise((resolve) => (timer = this.#clock.setTimeout(resolve, 2000)))]);
      this.#clock.clearTimeout(timer);
      this.#conn.close();
      for (const detach of this.#detach) detach();
      const ws = this.#ws;
      this.#disconnected(new RollCallError("closed", "the client is closed"));
      if (ws) ws.close(1000);
      for (const waiting of this.#waiting.splice(0)) waiting.reject(new RollCallError("closed", "the client is closed"));
      if (this.#timer !== null) this.#clock.clearTimeout(this.#timer);
      this.#timer = null;
      for (const ask of this.#tokenAsks) {
        this.#clock.clearTimeout(ask.timer);
        ask.reject(new RollCallError("closed", "the client is closed"));
      }
      this.#tokenAsks.clear();
      this.#emitState();
    })();
    return this.#closing;
  }

  // --- sessions (called by Session) ---

  /** @internal */
  _pump() {
    this.#pump();
  }

  /** @internal: sends a request now if connected, without waiting for its reply (bye on `pagehide`). */
  _sendNow(request) {
    if (this.#ready && this.#ws) this.#ws.send(JSON.stringify({ ...request, id: this.#nextId++ }));
  }

  /** @internal */
  _error(error) {
    this.#emit("error", error);
  }

  /** @internal */
  _clockNow() {
    return this.#clock.now();
  }

  // --- the connection ---

  #run(actions) {
    for (const action of actions) {
      if (action === "connect") this.#open();
      else if (action === "refresh") this.#refresh();
      else if (action === "check") this.#check();
    }
    if (this.#conn.state === "closed" && this.#conn.error) this.#refused(this.error);
    this.#emitState();
    this.#schedule();
  }

  /** The broker refuses the token: what waits for a connection fails with why (`reconnectNow` may try again). */
  #refused(error) {
    for (const waiting of this.#waiting.splice(0)) waiting.reject(error);
    for (const session of [...this.#sessions]) if (session._refused(error)) this.#sessions.delete(session);
  }

  async #open() {
    let token = this.#token;
    try {
      if (this.#getToken) token = await this.#askToken();
    } catch (error) {
      if (this.#conn.state === "closed") return;
      this.#run(this.#conn.failed(this.#clock.now(), { error: { code: "token_provider", message: String(error?.message ?? error) } }));
      return;
    }
    if (this.#conn.state === "closed") return;
    this.#token = token ?? this.#token;
    this.#tokenExp = tokenExpiry(token);
    if (this.#tokenExp !== null && this.#tokenExp <= this.#clock.now()) {
      // Expired by this clock: ask the provider once more at once. A second one that looks expired too is tried
      // all the same (this clock may be wrong; the broker's wall clock decides), so a provider is never asked in a
      // loop; a token the broker takes although it looks expired here is not refreshed by this clock (4001 then
      // brings a fresh one).
      if (!this.#getToken || !this.#expiredOnce) {
        this.#expiredOnce = true;
        this.#run(this.#conn.failed(this.#clock.now(), { tokenExpired: true }));
        return;
      }
    }
    this.#expiredOnce = false;
    const url = this.#urlWith(token);
    let ws;
    try {
      ws = new this.#WebSocket(url);
    } catch (error) {
      this.#run(this.#conn.failed(this.#clock.now(), { error: { code: "bad_url", message: String(error?.message ?? error) } }));
      return;
    }
    this.#ws = ws;
    this.#wsOpened = false;
    ws.onopen = () => {
      if (ws !== this.#ws) return;
      this.#wsOpened = true;
      this.#handshake(ws);
    };
    ws.onmessage = (event) => ws === this.#ws && this.#frame(event.data);
    ws.onclose = (event) => this.#closed(ws, event.code);
    // Node 20's WebSocket fires only `error` when the upgrade fails (browsers fire `close` too): either ends it.
    ws.onerror = () => !this.#wsOpened && this.#closed(ws, 1006);
  }

  /** On a fresh connection: learn the epoch (ping), subscribe to every followed topic, renew the sessions, read
   * everything followed again. Only then is the client "connected". */
  async #handshake(ws) {
    try {
      const pong = await this.#send({ op: "ping" });
      this.#brokerTime(pong.time);
      this.#watch.connectedTo(pong.epoch);
      // On a broker that keeps a presence log, the followed users' transitions missed while away come first, in
      // order (docs/history.md); where it cannot resume, the topics are subscribed afresh and read again.
      const resume = this.#watch.resumePoint(pong.log_epoch, pong.offset);
      // Until the client is ready, follow() sends nothing: what was followed while a subscribe was under way is
      // picked up by the next round. A topic the broker refuses (an invalid id, past its cap) is reported and left
      // out; the others are subscribed all the same.
      this.#refusedTopics.clear();
      const subscribed = new Set();
      for (;;) {
        const topics = ["broker/", ...this.#watch.topics.keys()].filter((topic) => !subscribed.has(topic));
        if (!topics.length) break;
        for (let i = 0; i < topics.length; i += SUBSCRIBE_CHUNK) {
          const chunk = topics.slice(i, i + SUBSCRIBE_CHUNK);
          await this.#subscribeEach(chunk, resume);
          for (const topic of chunk) subscribed.add(topic);
        }
      }
    } catch (error) {
      if (ws === this.#ws) this.#drop();
      return;
    }
    if (ws !== this.#ws) return;
    this.#ready = true;
    for (const session of this.#owedByes.splice(0)) this.#send({ op: "bye", session }).catch(() => {});
    this.#run(this.#conn.opened(this.#clock.now(), this.#tokenExp));
    for (const session of this.#sessions) session.machine.connectionOpened();
    this.#pump();
    for (const waiting of this.#waiting.splice(0)) {
      this.#send(waiting.request, undefined, waiting.retry).then(waiting.resolve, waiting.reject);
    }
    this.#resync();
  }

  #closed(ws, code) {
    if (ws !== this.#ws) return;
    const opened = this.#wsOpened;
    this.#disconnected(new RollCallError("disconnected", `the connection closed (${code})`));
    if (this.#conn.state === "closed") return;
    const now = this.#clock.now();
    if (opened) {
      this.#run(this.#conn.failed(now, { opened, code }));
      return;
    }
    this.#probe(this.#urlWith(this.#token)).then((httpStatus) => {
      this.#run(this.#conn.failed(this.#clock.now(), { opened, code, httpStatus }));
    });
  }

  /** Forgets the socket: pending replies fail (or wait for the next connection, for requests that may be sent
   * again), sessions and the watch hear of it. */
  #disconnected(error) {
    const ws = this.#ws;
    this.#ws = null;
    this.#ready = false;
    if (ws) ws.onopen = ws.onmessage = ws.onclose = null;
    for (const [, pending] of this.#pending) {
      this.#clock.clearTimeout(pending.timer);
      if (pending.retry && error.code !== "closed") this.#waiting.push(pending);
      else pending.reject(error);
    }
    this.#pending.clear();
    for (const session of this.#sessions) session.machine.connectionLost();
    this.#watch.disconnected();
    this.#pump();
  }

  /** Gives up on a connection that does not answer: closed here at once (a dead peer would never finish the close
   * handshake), and reconnected. */
  #drop() {
    const ws = this.#ws;
    if (!ws) return;
    try {
      ws.close(4000, "unresponsive");
    } catch {}
    this.#closed(ws, 4000);
  }

  /** Why did the upgrade fail? A WebSocket never says; ask the same URL over plain HTTP: its status (the broker
   * answers 426 to a request that is not an upgrade, whatever the token, 404 to a wrong path), "opaque" when the
   * broker answers but the browser hides the status (cross-origin), or null when nothing answers. */
  async #probe(url) {
    if (!this.#fetch) return null;
    const http = url.replace(/^ws/, "http");
    const signal = typeof AbortSignal !== "undefined" && AbortSignal.timeout ? AbortSignal.timeout(3000) : undefined;
    try {
      return (await this.#fetch(http, { cache: "no-store", signal })).status;
    } catch {}
    try {
      await this.#fetch(http, { mode: "no-cors", cache: "no-store", signal });
      return "opaque";
    } catch {
      return null;
    }
  }

  async #refresh() {
    try {
      const token = await this.#askToken();
      const reply = await this.#send({ op: "auth", token });
      const before = this.#tokenExp;
      this.#token = token;
      this.#tokenExp = typeof reply.expires === "number" ? reply.expires * 1000 : tokenExpiry(token);
      // A provider that hands out the same (cached) token again: no later exp, so asking again at once would loop.
      const stale = before !== null && this.#tokenExp !== null && this.#tokenExp <= before;
      this.#run(stale ? this.#conn.refreshFailed(this.#clock.now()) : this.#conn.refreshed(this.#clock.now(), this.#tokenExp));
    } catch (error) {
      if (error?.code !== "disconnected" && error?.code !== "closed") this.#emit("error", asError(error, "token_refresh"));
      this.#run(this.#conn.refreshFailed(this.#clock.now()));
    }
  }

  /** A token from `getToken`, which fails if it does not answer within `requestTimeoutMs` (a backend that hangs
   * would otherwise stall the connection for ever: "connecting", and `reconnectNow` ignored while it waits). */
  #askToken() {
    let timer;
    const late = new Promise((_, reject) => {
      timer = this.#clock.setTimeout(
        () => reject(new RollCallError("token_provider", `getToken did not answer within ${this.#requestTimeoutMs} ms`)),
        this.#requestTimeoutMs,
      );
      // close() gives up on it at once: its timer would keep a Node process alive.
      this.#tokenAsks.add({ timer, reject });
    });
    return Promise.race([Promise.resolve().then(() => this.#getToken()), late]).finally(() => {
      this.#clock.clearTimeout(timer);
      for (const ask of this.#tokenAsks) if (ask.timer === timer) this.#tokenAsks.delete(ask);
    });
  }

  /** Is the connection still alive? A ping within 5 s, or a new connection. */
  #check() {
    if (!this.#ready) return;
    this.#send({ op: "ping" }, 5000).then(
      (pong) => this.#brokerTime(pong.time),
      () => {},
    );
  }

  #urlWith(token) {
    if (!token) return this.#url;
    return `${this.#url}${this.#url.includes("?") ? "&" : "?"}token=${encodeURIComponent(token)}`;
  }

  // --- requests and replies ---

  /** A request from the application: sent now, or once connected. */
  #call(request, { retry }) {
    if (this.#conn.state === "closed") return Promise.reject(this.error ?? new RollCallError("closed", "the client is closed"));
    if (this.#ready) return this.#send(request, undefined, retry);
    return new Promise((resolve, reject) => this.#waiting.push({ request, resolve, reject, retry }));
  }

  #send(request, timeoutMs = this.#requestTimeoutMs, retry = false) {
    const ws = this.#ws;
    if (!ws) return Promise.reject(new RollCallError("disconnected", "not connected"));
    const id = this.#nextId++;
    return new Promise((resolve, reject) => {
      const timer = this.#clock.setTimeout(() => {
        if (!this.#pending.delete(id)) return;
        reject(new RollCallError("timeout", `no reply to ${request.op} within ${timeoutMs} ms`));
        this.#drop();
      }, timeoutMs);
      this.#pending.set(id, { request, resolve, reject, timer, retry });
      try {
        ws.send(JSON.stringify({ ...request, id }));
      } catch (error) {
        this.#pending.delete(id);
        this.#clock.clearTimeout(timer);
        reject(new RollCallError("disconnected", String(error?.message ?? error)));
      }
    });
  }

  #frame(data) {
    let frame;
    try {
      frame = JSON.parse(data);
    } catch {
      return;
    }
    if (typeof frame.topic === "string") {
      this.store.batch(() => this.#update(frame.topic, frame.message));
      return;
    }
    const pending = this.#pending.get(frame.id);
    if (!pending) return;
    this.#pending.delete(frame.id);
    this.#clock.clearTimeout(pending.timer);
    if (frame.ok) pending.resolve(frame);
    else pending.reject(errorOf(frame));
  }

  #update(topic, message) {
    if (topic === "broker/") {
      this.#brokerTime(message.time);
      const again = this.#watch.heartbeat(message, this.#clock.now());
      this.#emit("broker", message);
      if (again) this.#resync();
      this.#schedule();
      return;
    }
    const user = userOf(topic);
    if (user !== null) {
      this.#watch.noteOffset(message);
      this.#record(message);
      return;
    }
    const group = groupOf(topic);
    if (group !== null) {
      const applied = this.#watch.groupMessage(message);
      if (!applied) return;
      for (const fn of this.#groupEntries(group)) callSafely(fn, message);
      for (const record of applied.records) this.#deliver(record);
    }
  }

  #record(record) {
    if (this.#watch.record(record)) this.#deliver(record);
  }

  #deliver(record) {
    for (const entry of [...(this.#userFns.get(record.user) ?? [])]) callSafely(entry.fn, record);
  }

  #groupEntries(id) {
    return [...(this.#groupFns.get(id) ?? [])].filter((entry) => entry.active).map((entry) => entry.fn);
  }

  /** Reads every followed user and group again and applies the answers by the seq rules. */
  async #resync() {
    try {
      const users = this.#watch.users().filter((user) => !this.#refusedTopics.has(`presence/${user}/`));
      if (users.length) {
        const records = await this.query(users);
        this.store.batch(() => records.forEach((record) => this.#record(record)));
      }
      for (const id of this.#watch.groups()) if (!this.#refusedTopics.has(`group/${id}/`)) await this.#readGroup(id);
    } catch (error) {
      if (error?.code !== "disconnected" && error?.code !== "closed") this.#emit("error", asError(error, "resync"));
    }
  }

  #readGroupReporting(id) {
    return this.#readGroup(id).catch((error) => {
      if (error?.code !== "disconnected" && error?.code !== "closed") this.#emit("error", asError(error, "group"));
    });
  }

  /** Every page of a group, applied as one read. */
  async #readGroup(id) {
    let reply;
    const members = {};
    let after;
    do {
      reply = await this.#call({ op: "group", group: id, ...(after ? { after } : {}) }, { retry: true });
      Object.assign(members, reply.members);
      after = reply.next;
    } while (after);
    this.store.batch(() => {
      const applied = this.#watch.groupRead({ ...reply, members });
      if (!applied) return;
      const view = { ...applied.view };
      for (const fn of this.#groupEntries(id)) callSafely(fn, view);
      for (const record of applied.records) this.#deliver(record);
    });
  }

  #subscribe(topics) {
    if (!topics.length || !this.#ready) return Promise.resolve();
    const done = this.#subscribeEach(topics);
    done.catch((error) => {
      if (error.code !== "disconnected" && error.code !== "closed") this.#emit("error", error);
    });
    return done;
  }

  /** Subscribes to `topics`. The broker applies a `subscribe` all or nothing: when it refuses one, the topics are
   * tried again in halves, so the good ones are subscribed and each refused one is reported on "error" (with its
   * topic) and left out of the reads. Rejects only when the connection fails. */
  async #subscribeEach(topics, resume = null) {
    try {
      await this.#send({ op: "subscribe", topics, ...(resume ?? {}) });
      for (const topic of topics) this.#refusedTopics.delete(topic); // refused at the cap before, taken now
    } catch (error) {
      if (!(error instanceof RollCallError) || CLIENT_CODES.has(error.code)) throw error;
      if (resume && RESUME_REFUSALS.has(error.code)) return this.#subscribeEach(topics);
      if (topics.length === 1) {
        this.#refusedTopics.add(topics[0]);
        this.#emit("error", new RollCallError(error.code, `subscribe ${topics[0]}: ${error.message}`));
        return;
      }
      const half = Math.ceil(topics.length / 2);
      await this.#subscribeEach(topics.slice(0, half));
      await this.#subscribeEach(topics.slice(half));
    }
  }

  #unsubscribe(topics) {
    if (topics.length && this.#ready) this.#send({ op: "unsubscribe", topics }).catch(() => {});
  }

  #brokerTime(time) {
    if (typeof time === "number") this.#brokerOffset = time - this.#clock.now();
  }

  // --- sessions ---

  #pump() {
    const now = this.#clock.now();
    for (const session of this.#sessions) {
      const machine = session.machine;
      const request = this.#ready ? machine.next(now) : null;
      if (request) {
        this.#send(request).then(
          (reply) => this.#sessionReplied(session, { reply }),
          (error) => {
            if (error.code !== "disconnected" && error.code !== "timeout" && error.code !== "closed") this.#sessionReplied(session, { error });
          },
        );
      } else if (machine.phase === "closed") {
        // Ended while disconnected: the broker still holds the session (for its grace period, if it has one, and
        // renewed by nothing): say bye on the next connection, unless the whole client is closing.
        if (!this.#ready && !this.#closing && machine.session !== null && !machine.needsHello) this.#owedByes.push(machine.session);
        this.#sessions.delete(session);
        session._ended(null);
      }
    }
    this.#schedule();
  }

  #sessionReplied(session, outcome) {
    for (const event of session.machine.replied(outcome, this.#clock.now())) {
      if (event.type === "ended") {
        this.#sessions.delete(session);
        session._ended(event.error ? errorOf({ error: event.error }) : null, event.first);
      } else session._event(event);
    }
    this.#pump();
  }

  // --- time ---

  #schedule() {
    if (this.#timer !== null) this.#clock.clearTimeout(this.#timer);
    this.#timer = null;
    if (this.#conn.state === "closed" && this.#closing) return;
    const deadlines = [this.#conn.deadline(), this.#watch.deadline(), ...[...this.#sessions].map((s) => s.machine.deadline())];
    const next = Math.min(...deadlines.filter((d) => d !== null));
    if (!Number.isFinite(next)) return;
    this.#timer = this.#clock.setTimeout(() => {
      this.#timer = null;
      this.#tick();
    }, Math.max(0, next - this.#clock.now()));
  }

  #tick() {
    const now = this.#clock.now();
    const actions = this.#conn.tick(now);
    if (this.#watch.resyncDue(now)) this.#resync();
    if (this.#watch.tick(now)) {
      this.#emit("broker", { lost: true });
      actions.push("check");
    }
    this.#run(actions);
    this.#pump();
  }

  // --- events ---

  #emitState() {
    const state = this.state;
    if (state === this.#lastState) return;
    this.#lastState = state;
    this.#emit("state", state, this.error);
  }

  #emit(event, ...args) {
    for (const fn of [...this.#listeners[event]]) callSafely(fn, ...args);
  }
}

/** The client's own codes: the connection failed, not the request. */
const CLIENT_CODES = new Set(["disconnected", "timeout", "closed", "unauthorized", "token_expired", "token_provider", "bad_url"]);

function asError(error, code) {
  if (error instanceof RollCallError) return error;
  return new RollCallError(code, String(error?.message ?? error));
}
