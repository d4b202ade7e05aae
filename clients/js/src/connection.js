import { Backoff } from "./backoff.js";
import { refreshTime } from "./token.js";

/**
 * The connection's life, with no socket and no timer: told what happened (with the time), it answers what to do.
 * The shell (client.js) opens and closes the WebSocket, asks for tokens and keeps one timer for `deadline()`.
 *
 * States: "idle" → "connecting" → "connected" ⇄ "reconnecting", and "closed" (by the application, or because the
 * broker refuses the token: `error` says why). Actions: "connect" (get a token, open a socket), "refresh" (get a
 * fresh token and present it with `auth`), "check" (ping the broker: is this connection still alive?).
 *
 * Rules: a connection that was up for a second or more and dropped is tried again at once, then with capped,
 * jittered backoff (reset once a connection has stayed up that long); a
 * connection closed with 4001 (token expired) is tried again at once with a fresh token, or, with a fixed token,
 * ends "closed" (every attempt would be refused); an upgrade refused with 401 is tried once more with a fresh token
 * (with `getToken`) and then ends "closed" with `unauthorized`, so a bad token never loops. No WebSocket API says
 * why an upgrade failed, and the shell's probe over plain HTTP gets 426 from the broker whatever the token (or an
 * "opaque" answer, cross-origin in a browser): an upgrade refused by a broker that answers HTTP counts as a refusal,
 * and three in a row end "closed" the same way. A 404 (no endpoint at that URL) ends "closed" with `bad_url`. Tokens are refreshed a quarter of their remaining lifetime
 * before `exp` (1 s to 60 s), and 5 s later again after a failed refresh.
 */
export class ConnectionMachine {
  /** @param {{backoff?: Backoff, canRefreshToken?: boolean}} [options] */
  constructor({ backoff = new Backoff(), canRefreshToken = false } = {}) {
    this.backoff = backoff;
    this.canRefreshToken = canRefreshToken;
    /** @type {"idle"|"connecting"|"connected"|"reconnecting"|"closed"} */
    this.state = "idle";
    /** Why the last attempt failed, or why the connection is closed: `{code, message}`. */
    this.error = null;
    /** Failed attempts since the last connection. */
    this.attempt = 0;
    this.retryAt = null;
    this.refreshAt = null;
    this.tokenExp = null;
    this.refusals = 0;
    this.attempting = false;
    this.openedAt = null;
    /** reconnectNow() came while an attempt was under way: if it fails, the next one goes at once. */
    this.wanted = false;
  }

  /** Start connecting (once). */
  start() {
    if (this.state !== "idle") return [];
    this.state = "connecting";
    return this.#connect();
  }

  /** The connection is up (and answered): `tokenExp` is the token's `exp` in ms, if it has one. */
  opened(now, tokenExp = null) {
    this.attempting = false;
    this.wanted = false;
    if (this.state === "closed") return [];
    this.state = "connected";
    this.error = null;
    this.attempt = 0;
    this.refusals = 0;
    this.openedAt = now;
    this.#tokenIs(now, tokenExp);
    return [];
  }

  /**
   * The connection ended, or an attempt failed. `cause`: `opened` (it had been connected), `code` (the close
   * code), `httpStatus` (what the upgrade was answered, if known: a number, "opaque" when a browser could only tell
   * that the broker answers, or null when it does not), `tokenExpired` (the token was past its `exp` before the
   * attempt), `error` (a token provider that failed, say).
   */
  failed(now, cause = {}) {
    this.attempting = false;
    if (this.state === "closed") return [];
    this.refreshAt = null;
    const expired = (cause.opened && cause.code === 4001) || cause.tokenExpired;
    if (expired) {
      if (!this.canRefreshToken) {
        return this.#stop({ code: "token_expired", message: "the token expired and no getToken was given for a fresh one" });
      }
      this.error = { code: "token_expired", message: "the token expired: asking for a fresh one" };
      return this.#retry(now, 0);
    }
    if (cause.error?.code === "bad_url") {
      // The WebSocket constructor refused the URL itself (not ws:// or wss://, say): no attempt can succeed.
      return this.#stop({ code: "bad_url", message: String(cause.error.message ?? "a URL the WebSocket refuses") });
    }
    if (!cause.opened && cause.httpStatus === 404) {
      return this.#stop({ code: "bad_url", message: "no WebSocket endpoint at this URL (HTTP 404)" });
    }
    // The broker answers HTTP but refused the upgrade: a 401 if the probe could say so; otherwise (426 to the
    // probe, or a status the browser hides) most likely the token too, or a broker at its connection cap (503).
    const presumed = typeof cause.httpStatus === "number" ? cause.httpStatus !== 503 && cause.httpStatus < 500 : cause.httpStatus === "opaque";
    const refused = !cause.opened && !cause.error && (cause.httpStatus === 401 || presumed);
    if (refused) {
      this.refusals += 1;
      const limit = cause.httpStatus === 401 ? (this.canRefreshToken ? 2 : 1) : 3;
      if (this.refusals >= limit) {
        return this.#stop({
          code: "unauthorized",
          message:
            cause.httpStatus === 401
              ? "the broker refused the token (HTTP 401)"
              : `the broker refused the upgrade ${limit} times in a row (a WebSocket cannot tell why: most likely the token)`,
        });
      }
    } else {
      this.refusals = 0;
    }
    this.error = cause.error
      ? { code: cause.error.code ?? "token_provider", message: String(cause.error.message ?? cause.error) }
      : {
          code: "disconnected",
          message: cause.opened
            ? `the connection closed (${cause.code ?? "?"})`
            : `could not connect${typeof cause.httpStatus === "number" ? ` (HTTP ${cause.httpStatus})` : ""}`,
        };
    // A connection that was up for a while is tried again at once (its sessions renew within the grace period); a
    // failed attempt, or a connection that dropped right after it opened, waits for the backoff.
    const stable = cause.opened && this.openedAt !== null && now - this.openedAt >= 1000;
    const wanted = this.wanted;
    this.wanted = false;
    if (stable || wanted) this.backoff.reset();
    this.openedAt = null;
    return this.#retry(now, stable || wanted ? 0 : this.backoff.next());
  }

  /** The time has come for whatever was due. */
  tick(now) {
    if (this.state === "reconnecting" && this.retryAt !== null && now >= this.retryAt) {
      this.retryAt = null;
      return this.#connect();
    }
    if (this.state === "connected" && this.refreshAt !== null && now >= this.refreshAt) {
      this.refreshAt = null;
      return ["refresh"];
    }
    return [];
  }

  /** A fresh token was accepted with `auth`. */
  refreshed(now, tokenExp) {
    if (this.state === "connected") this.#tokenIs(now, tokenExp);
    return [];
  }

  /** A refresh failed (the provider threw, or the broker refused the token): try again in 5 s, or once more just
   * before `exp` if that comes sooner (never in a loop: past that, every 5 s until a 4001 close comes). */
  refreshFailed(now) {
    if (this.state !== "connected") return [];
    const lastChance = this.tokenExp === null ? Infinity : this.tokenExp - 500;
    this.refreshAt = lastChance > now ? Math.min(now + 5000, lastChance) : now + 5000;
    return [];
  }

  /** The network is back (the browser's `online` event) or the application asks: skip the backoff, or check a
   * connection that looks up. A connection closed by `unauthorized` or an expired token is tried again too. */
  reconnectNow(now) {
    if (this.state === "connected") return ["check"];
    if (this.state === "closed" && this.error === null) return []; // closed by the application
    if (this.attempting) {
      this.wanted = true; // not lost: if this attempt fails, the next one goes at once
      return [];
    }
    if (this.state === "closed") {
      this.refusals = 0;
      this.state = "reconnecting";
    }
    if (this.state !== "reconnecting") return [];
    this.backoff.reset();
    this.retryAt = now;
    return this.tick(now);
  }

  /** The application closes the client. */
  close() {
    this.wanted = false;
    this.state = "closed";
    this.error = null;
    this.retryAt = null;
    this.refreshAt = null;
    return [];
  }

  /** The next time `tick` has something to do, or null. */
  deadline() {
    if (this.state === "reconnecting") return this.retryAt;
    if (this.state === "connected") return this.refreshAt;
    return null;
  }

  #tokenIs(now, tokenExp) {
    this.tokenExp = tokenExp;
    // A token already past its exp by this clock, which the broker took all the same: this clock is wrong, and
    // refreshing by it would loop; the broker's 4001 at the real exp brings a fresh one.
    const usable = tokenExp !== null && tokenExp > now;
    this.refreshAt = this.canRefreshToken && usable ? refreshTime(now, tokenExp) : null;
  }

  #retry(now, delay) {
    this.state = "reconnecting";
    this.attempt += 1;
    this.retryAt = now + delay;
    return delay === 0 ? this.tick(now) : [];
  }

  #stop(error) {
    this.state = "closed";
    this.error = error;
    this.retryAt = null;
    this.refreshAt = null;
    return [];
  }

  #connect() {
    this.attempting = true;
    return ["connect"];
  }
}
