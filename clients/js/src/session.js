/**
 * One presence session's life, with no socket and no timer (the rules of the Swift `SessionMachine`, for one
 * WebSocket): the shell tells it when the connection opens and drops, hands it each reply, and sends the request
 * `next(now)` returns. One request is under way at a time.
 *
 * Rules: say hello once connected; send the latest status asked for (only the latest, if several were asked while a
 * request was under way); a status with `afterMs` is held by the broker (`after_ms`), which publishes it only if
 * nothing else follows in time, and a later status replaces or cancels it there; on a fresh connection name the
 * session at once (a heartbeat, or the pending status), which renews it within the broker's grace period; on
 * `unknown_session` say hello again with the status asked for last (a held status not yet due is sent again after the
 * hello with what remains of its delay, so a reconnection never publishes it early); heartbeat at the granted interval
 * only with `keepalive: "ttl"`; on close say bye if connected.
 */
export class SessionMachine {
  /**
   * @param {{user: string, device?: string, status?: string, text?: string|null, keepalive?: "connection"|"ttl",
   *   ttlMs?: number}} hello
   */
  constructor({ user, device, status = "online", text = null, keepalive = "connection", ttlMs }) {
    this.user = user;
    this.device = device;
    this.keepalive = keepalive;
    this.ttlMs = ttlMs;
    /** The status asked for last; `afterMs` when it is to be held, `askedAt` when it was asked. */
    this.desired = { status, text: text ?? null, afterMs: null, askedAt: 0 };
    /** What the broker shows for this session now (not counting a held change). */
    this.applied = { status, text: text ?? null };
    this.version = 1;
    this.sentVersion = 0;
    /** @type {"opening"|"live"|"closed"} */
    this.phase = "opening";
    this.session = null;
    this.heartbeatMs = null;
    this.connected = false;
    this.needsHello = true;
    this.renew = false;
    this.closing = false;
    this.inFlight = null;
    this.nextBeatAt = null;
    /** Whether the broker holds a change for this session (the last status reply said `held`). */
    this.held = false;
  }

  /** The application asks for a status (held by the broker for `afterMs` if given). Returns its version. */
  setStatus(status, text, afterMs, now) {
    this.desired = { status, text: text ?? null, afterMs: afterMs ?? null, askedAt: now };
    this.version += 1;
    return this.version;
  }

  /** The application ends the session: bye when connected, else nothing to say (the broker ends it by the close). */
  close() {
    this.closing = true;
    if (!this.connected && this.inFlight === null) this.phase = "closed";
  }

  connectionOpened() {
    this.connected = true;
    if (this.session !== null && !this.needsHello) this.renew = true;
  }

  /** The connection dropped: whatever was under way is unknown and is asked again on the next one. */
  connectionLost() {
    this.connected = false;
    this.inFlight = null;
    if (this.closing) this.phase = "closed";
  }

  /** The request to send now, or null. */
  next(now) {
    if (this.phase === "closed" || !this.connected || this.inFlight !== null) return null;
    if (this.closing) {
      if (this.session === null || this.needsHello) {
        this.phase = "closed";
        return null;
      }
      return this.#send({ op: "bye", session: this.session }, { kind: "bye" });
    }
    if (this.needsHello) {
      const { status, text, afterMs, askedAt } = this.desired;
      const stillHeld = afterMs !== null && askedAt + afterMs > now;
      const says = stillHeld ? this.applied : { status, text };
      const request = { op: "hello", user: this.user, status: says.status };
      if (says.text) request.text = says.text;
      if (this.device !== undefined) request.device = this.device;
      if (this.keepalive === "connection") request.keepalive = "connection";
      if (this.ttlMs !== undefined) request.ttl_ms = this.ttlMs;
      return this.#send(request, { kind: "hello", says, version: stillHeld ? 0 : this.version });
    }
    if (this.sentVersion < this.version) {
      const { status, text, afterMs, askedAt } = this.desired;
      const request = { op: "status", session: this.session, status, text };
      if (afterMs !== null) request.after_ms = Math.min(600000, Math.max(1, Math.round(askedAt + afterMs - now)));
      return this.#send(request, { kind: "status", version: this.version, says: { status, text }, held: afterMs !== null });
    }
    if (this.renew || (this.keepalive === "ttl" && this.nextBeatAt !== null && now >= this.nextBeatAt)) {
      return this.#send({ op: "heartbeat", session: this.session }, { kind: "heartbeat" });
    }
    return null;
  }

  /**
   * How the request under way ended: `{reply}` or `{error: {code, message}}`. Returns what the application should
   * hear: `granted` (`first` for the first hello), `acked` (status versions up to `version`, `held`), `refused` (a
   * status or heartbeat the broker refused), `ended` (the session is over: bye, or a hello refused, with `error`).
   */
  replied(outcome, now) {
    const call = this.inFlight;
    this.inFlight = null;
    if (call === null) return [];
    if (call.kind === "bye") {
      this.phase = "closed";
      return [{ type: "ended" }];
    }
    if (outcome.reply) {
      const reply = outcome.reply;
      const events = [];
      this.renew = false;
      if (call.kind === "hello") {
        const first = this.phase === "opening";
        this.session = reply.session;
        this.heartbeatMs = reply.heartbeat_ms ?? null;
        this.needsHello = false;
        this.applied = call.says;
        this.held = false;
        this.phase = "live";
        if (call.version > this.sentVersion) this.sentVersion = call.version;
        // The hello said the status before a held one: the held one goes out again, with what remains of its delay.
        if (call.version === 0) this.sentVersion = Math.min(this.sentVersion, this.version - 1);
        events.push({ type: "granted", first, session: reply.session });
        if (call.version > 0) events.push({ type: "acked", version: call.version, held: false });
      } else if (call.kind === "status") {
        this.sentVersion = Math.max(this.sentVersion, call.version);
        this.held = reply.held === true;
        if (!this.held) this.applied = call.says;
        events.push({ type: "acked", version: call.version, held: this.held });
      }
      this.nextBeatAt = this.heartbeatMs === null ? null : now + this.heartbeatMs;
      return events;
    }
    const error = outcome.error;
    if (error.code === "unknown_session" && (call.kind === "heartbeat" || call.kind === "status")) {
      // The session ended (the grace period ran out, a TTL, a broker restart): a new one, with the status asked last.
      this.needsHello = true;
      this.renew = false;
      return [];
    }
    if (call.kind === "hello") {
      this.phase = "closed";
      return [{ type: "ended", error, first: this.session === null }];
    }
    if (call.kind === "status") {
      this.sentVersion = Math.max(this.sentVersion, call.version);
      // Refused (a text too long, say): the status asked for is what the broker has, not the refused one, which a
      // later hello (after `unknown_session`) would otherwise ask again, and have refused, ending the session.
      if (call.version === this.version) this.desired = { ...this.applied, afterMs: null, askedAt: now };
    }
    this.renew = false;
    return [{ type: "refused", version: call.kind === "status" ? call.version : 0, error }];
  }

  /** When a heartbeat is due (keepalive "ttl" only), or null. */
  deadline() {
    if (this.keepalive !== "ttl" || !this.connected || this.phase !== "live" || this.inFlight !== null) return null;
    return this.nextBeatAt;
  }

  #send(request, call) {
    this.inFlight = call;
    return request;
  }
}
