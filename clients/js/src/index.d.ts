// Type declarations for RollCall's JavaScript client (written by hand; `tsc --noEmit` checks them in
// clients/js/scripts/test). The wire format is docs/protocol.md and docs/websocket.md.

/** A status a session may ask for. `invisible` appears offline to everyone else (protocol §16.4). */
export type Status = "online" | "busy" | "away" | "offline" | "invisible";

/** A user's presence record (protocol §9). */
export interface PresenceRecord {
  user: string;
  status: "online" | "busy" | "away" | "offline";
  text?: string;
  /** Broker time (ms) of the last change of status or text; null in the unknown record. */
  since: number | null;
  /** When available: the record's own time; otherwise when the user stopped being available; null if never seen. */
  last_seen: number | null;
  sessions: number;
  /** The record's version: only ever grows within a broker run (0 in the unknown record). */
  seq: number;
  /** Why the user is offline: bye, status, closed, timeout, restart, node_lost, revoked, or a newer one. */
  reason?: string;
  /** Where the record stands in the broker's presence log (docs/history.md), on a broker that keeps one. */
  offset?: number;
}

export interface StatusCounts {
  online: number;
  busy: number;
  away: number;
  offline: number;
}

/** A group message on `group/<id>/` (protocol §8.5): the aggregate form... */
export interface GroupMessage {
  group: string;
  online: number;
  total: number;
  counts: StatusCounts;
  changed: PresenceRecord[];
  removed: string[];
  seq: number;
}

/** ...or the deletion form. */
export interface GroupDeleted {
  group: string;
  deleted: true;
  seq: number;
}

/** The whole view of a group: what `followGroup` delivers first, and what `store.group(id)` holds. */
export interface GroupView {
  group: string;
  online: number;
  total: number;
  counts: StatusCounts;
  members: Record<string, PresenceRecord>;
  seq: number;
  deleted?: true;
}

/** The broker's heartbeat on `broker/` (protocol §8.9). */
export interface BrokerHeartbeat {
  broker: string;
  epoch: string;
  time: number;
  heartbeat_ms: number;
  users_available: number;
  sessions: number;
  dropped?: number;
  [field: string]: unknown;
}

export type ConnectionState = "connecting" | "connected" | "reconnecting" | "closed";

/** An error from the broker (its `code`, protocol §7: forbidden, bad_request, limit...) or from the client:
 * `disconnected`, `timeout`, `closed`, `unauthorized` (the upgrade was refused), `token_expired`,
 * `token_provider` (getToken threw). */
export class RollCallError extends Error {
  constructor(code: string, message: string);
  readonly code: string;
}

/** A WebSocket constructor: the browser's, Node 20's (`--experimental-websocket`), or a library's with the same
 * shape. */
export interface WebSocketLike {
  send(data: string): void;
  close(code?: number, reason?: string): void;
  // The client sets these; `any` events, so that the DOM's `WebSocket` (whose handlers take a `MessageEvent`, a
  // `CloseEvent`) and libraries' sockets are assignable: it reads `event.data` and `event.code` only.
  onopen: ((event: any) => void) | null;
  onmessage: ((event: any) => void) | null;
  onclose: ((event: any) => void) | null;
  onerror: ((event: any) => void) | null;
}
export type WebSocketConstructor = new (url: string) => WebSocketLike;

/** A clock and timer, injected in tests. */
export interface Clock {
  now(): number;
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

export interface BackoffOptions {
  /** First delay after a failed attempt (ms, default 500); doubles up to `maxMs`. */
  initialMs?: number;
  /** Cap (ms, default 30000). */
  maxMs?: number;
  /** Each delay is made random within ± this fraction (default 0.2). */
  jitter?: number;
  random?: () => number;
}

export interface LifecycleOptions {
  /** The status a hidden tab asks for (default "away"). */
  hidden?: "away" | "offline" | "busy";
  /** How long the broker holds it before publishing it (ms, default 5000). */
  afterMs?: number;
}

export interface RollCallOptions {
  /** A fixed token (JWT). With it, an expired token ends the client ("closed", token_expired). */
  token?: string;
  /** Asked before each connection and before each token's `exp` (then presented with `auth`). */
  getToken?: () => string | Promise<string>;
  /** Defaults to globalThis.WebSocket. */
  WebSocket?: WebSocketConstructor;
  /** Browser only: hidden tab → held status; visible → cancelled; pagehide → bye. */
  lifecycle?: boolean | LifecycleOptions;
  backoff?: BackoffOptions;
  /** A request not answered within this time drops the connection (ms, default 10000). */
  requestTimeoutMs?: number;
  /** Browser only: reconnectNow() on the window's `online` event (default true). */
  reconnectOnOnline?: boolean;
  clock?: Clock;
  /** Used to learn why an upgrade failed (401); defaults to globalThis.fetch. */
  fetch?: typeof fetch;
}

export interface OnlineOptions {
  user: string;
  status?: Status;
  text?: string | null;
  /** "connection" (the default here): the connection keeps the session alive, no heartbeats (websocket.md §4.1);
   * "ttl": heartbeats at the granted interval, as on ZeroMQ. */
  keepalive?: "connection" | "ttl";
  device?: string;
  ttlMs?: number;
}

export interface SetStatusOptions {
  text?: string | null;
  /** Held by the broker this long (1..600000 ms) and published only if no other status follows. */
  afterMs?: number;
}

/** A presence session, from `rc.online()`. */
export class Session {
  private constructor();
  readonly user: string;
  /** The broker's session token (changes when the session had to be opened again). */
  readonly id: string | null;
  /** The status asked for last. */
  readonly status: Status;
  /** Whether the broker holds a change for this session (afterMs) that it has not published yet. */
  readonly held: boolean;
  /** Resolves with this session once the broker granted it. */
  readonly granted: Promise<Session>;
  /** Sent at once, or when the connection is back; resolves when the broker took it. */
  setStatus(status: Status, options?: SetStatusOptions): Promise<{ held: boolean }>;
  bye(): Promise<void>;
}

/** Stops a follow: all of it, or only some of its users. */
export type StopFollowing = (users?: string | string[]) => void;

export class Store {
  /** The latest record of a followed user, or of a member of a followed group. */
  get(user: string): PresenceRecord | undefined;
  /** The latest view of a followed group. */
  group(id: string): GroupView | undefined;
  users(): Map<string, PresenceRecord>;
  /** Changes with every change: a cheap snapshot for useSyncExternalStore. */
  readonly version: number;
  /** `fn` is called once per update, query answer or group read, with the ids of what changed. */
  subscribe(fn: (change: { users: string[]; groups: string[] }) => void): () => void;
}

export interface GroupReply {
  ok: true;
  group: string;
  online: number;
  total: number;
  counts: StatusCounts;
  members: Record<string, PresenceRecord>;
  next?: string;
  seq: number;
}

export interface PingReply {
  ok: true;
  broker: string;
  version: string;
  epoch: string;
  time: number;
  test_mode?: boolean;
  node?: string;
  cluster?: string;
}

export class RollCall {
  constructor(url: string, options?: RollCallOptions);
  readonly state: ConnectionState;
  /** Why the last attempt failed, or why the client is closed; null when all is well. */
  readonly error: RollCallError | null;
  readonly store: Store;
  readonly sessions: Session[];
  /** The broker's clock now, estimated from its heartbeats (ms since 1970). */
  now(): number;

  on(event: "state", fn: (state: ConnectionState, error: RollCallError | null) => void): () => void;
  on(event: "broker", fn: (beat: BrokerHeartbeat | { lost: true }) => void): () => void;
  on(event: "error", fn: (error: RollCallError) => void): () => void;
  off(event: "state" | "broker" | "error", fn: (...args: any[]) => void): void;

  online(options: OnlineOptions): Promise<Session>;
  follow(users: string | string[], fn: (record: PresenceRecord) => void): StopFollowing;
  unfollow(users: string | string[]): void;
  followGroup(id: string, fn: (group: GroupView | GroupMessage | GroupDeleted) => void): () => void;
  query(users: string[]): Promise<PresenceRecord[]>;
  ping(): Promise<PingReply>;
  /** Defines, edits or reads a group: the reply with the members of every page (no `next`); with `after`, that one
   * page (with `next` if more follow). */
  group(id: string, edit?: { members?: string[]; add?: string[]; remove?: string[]; after?: string }): Promise<GroupReply>;
  ungroup(id: string): Promise<{ ok: true; deleted: boolean }>;
  /** Any request, such as `{op: "advance", ms}` against a test-mode broker. */
  call(request: { op: string; [field: string]: unknown }): Promise<{ ok: true; [field: string]: unknown }>;
  reconnectNow(): void;
  close(): Promise<void>;
}

// The state machines (no sockets, no timers), for tests and other transports.

export class Backoff {
  constructor(options?: BackoffOptions);
  failures: number;
  next(): number;
  reset(): void;
}

export type ConnectionAction = "connect" | "refresh" | "check";

export interface ConnectionCause {
  opened?: boolean;
  code?: number;
  httpStatus?: number | "opaque" | null;
  tokenExpired?: boolean;
  error?: { code?: string; message?: string };
}

export class ConnectionMachine {
  constructor(options?: { backoff?: Backoff; canRefreshToken?: boolean });
  readonly state: "idle" | "connecting" | "connected" | "reconnecting" | "closed";
  readonly error: { code: string; message: string } | null;
  readonly attempt: number;
  start(): ConnectionAction[];
  opened(now: number, tokenExp?: number | null): ConnectionAction[];
  failed(now: number, cause?: ConnectionCause): ConnectionAction[];
  tick(now: number): ConnectionAction[];
  refreshed(now: number, tokenExp: number | null): ConnectionAction[];
  refreshFailed(now: number): ConnectionAction[];
  reconnectNow(now: number): ConnectionAction[];
  close(): ConnectionAction[];
  deadline(): number | null;
}

export type SessionRequest =
  | { op: "hello"; user: string; status: Status; text?: string; device?: string; keepalive?: "connection"; ttl_ms?: number }
  | { op: "status"; session: string; status: Status; text: string | null; after_ms?: number }
  | { op: "heartbeat"; session: string }
  | { op: "bye"; session: string };

export type SessionEvent =
  | { type: "granted"; first: boolean; session: string }
  | { type: "acked"; version: number; held: boolean }
  | { type: "refused"; version: number; error: { code: string; message: string } }
  | { type: "ended"; error?: { code: string; message: string }; first?: boolean };

export class SessionMachine {
  constructor(hello: OnlineOptions);
  readonly phase: "opening" | "live" | "closed";
  readonly session: string | null;
  readonly held: boolean;
  setStatus(status: Status, text: string | null | undefined, afterMs: number | null | undefined, now: number): number;
  close(): void;
  connectionOpened(): void;
  connectionLost(): void;
  next(now: number): SessionRequest | null;
  replied(outcome: { reply: Record<string, unknown> } | { error: { code: string; message: string } }, now: number): SessionEvent[];
  deadline(): number | null;
}

export class WatchMachine {
  constructor(store?: Store);
  readonly store: Store;
  follow(topics: string[]): string[];
  unfollow(topics: string[]): string[];
  users(): string[];
  groups(): string[];
  connectedTo(epoch: string): boolean;
  record(record: PresenceRecord): boolean;
  /** The presence log's epoch and the highest offset received on a subscription (docs/history.md). */
  readonly logEpoch: string | null;
  readonly lastOffset: number | null;
  noteOffset(record: PresenceRecord): void;
  /** Where a new connection resumes (`ping`'s `log_epoch` and `offset`); null: subscribe afresh, and resume later
   * from `offset`. */
  resumePoint(logEpoch: string | undefined, offset?: number): { after: number; log_epoch: string } | null;
  groupMessage(message: GroupMessage | GroupDeleted): { records: PresenceRecord[] } | null;
  groupRead(read: { group: string; online: number; total: number; counts: StatusCounts; members: Record<string, PresenceRecord>; seq: number }): { view: GroupView; records: PresenceRecord[] } | null;
  heartbeat(beat: BrokerHeartbeat, now: number): boolean;
  /** A read again held back by the pause (`dropped` kept growing) is due now. */
  resyncDue(now: number): boolean;
  tick(now: number): boolean;
  disconnected(): void;
  deadline(): number | null;
}

export function tokenExpiry(token: string): number | null;
export function refreshTime(now: number, expMs: number): number;
