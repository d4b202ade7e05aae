// A fake clock and a fake broker behind a fake WebSocket, for the shell's unit tests: no network, no real time.
import { RollCall } from "../../src/index.js";

export class FakeClock {
  constructor() {
    this.time = 1000;
    this.timers = new Map();
    this.next = 1;
  }
  now() {
    return this.time;
  }
  setTimeout(fn, ms) {
    const handle = this.next++;
    this.timers.set(handle, { at: this.time + ms, fn });
    return handle;
  }
  clearTimeout(handle) {
    this.timers.delete(handle);
  }
  /** Moves the clock, firing the timers due on the way in order. */
  async advance(ms) {
    const target = this.time + ms;
    for (;;) {
      const due = [...this.timers].filter(([, t]) => t.at <= target).sort((a, b) => a[1].at - b[1].at)[0];
      if (!due) break;
      this.timers.delete(due[0]);
      this.time = Math.max(this.time, due[1].at);
      due[1].fn();
      await settle();
    }
    this.time = target;
    await settle();
  }
}

export const settle = async () => {
  for (let i = 0; i < 20; i++) await Promise.resolve();
};

/** A fake broker behind a fake WebSocket: answers ping, subscribe, hello, heartbeat, status, query; `handle` for more. */
export function fakeBroker({ refuse = false } = {}) {
  const broker = { sockets: [], sent: [], epoch: "e1", sessions: new Set(), up: true };
  broker.WebSocket = class {
    constructor(url) {
      this.url = url;
      broker.sockets.push(this);
      queueMicrotask(() => {
        if (!broker.up || refuse) return this.#close(1006);
        this.onopen?.({});
      });
    }
    send(data) {
      const request = JSON.parse(data);
      broker.sent.push(request);
      const reply = { ok: true, id: request.id };
      if (request.op === "ping") Object.assign(reply, { broker: "fake", epoch: broker.epoch, time: 5000 });
      if (request.op === "hello") {
        const session = `s${broker.sessions.size + 1}`;
        broker.sessions.add(session);
        Object.assign(reply, { session, heartbeat_ms: 1000, ttl_ms: 3000 });
      }
      if ((request.op === "heartbeat" || request.op === "status") && !broker.sessions.has(request.session)) {
        Object.assign(reply, { ok: false, error: { code: "unknown_session", message: "no such session" } });
      }
      if (request.op === "query") reply.presence = Object.fromEntries(request.users.map((u) => [u, { user: u, status: "online", seq: 7 }]));
      // A test's own answers: `broker.handle(request, reply)` may change the reply, or return false to send none.
      if (broker.handle && broker.handle(request, reply, this) === false) return;
      if (broker.silent) return;
      queueMicrotask(() => this.onmessage?.({ data: JSON.stringify(reply) }));
    }
    push(topic, message) {
      this.onmessage?.({ data: JSON.stringify({ topic, message }) });
    }
    close() {
      this.#close(1005);
    }
    #close(code) {
      queueMicrotask(() => this.onclose?.({ code }));
    }
  };
  broker.drop = () => broker.sockets.at(-1).close();
  return broker;
}

export function client(broker, clock, options = {}) {
  return new RollCall("ws://fake/v1/ws", {
    token: "t", WebSocket: broker.WebSocket, clock, fetch: async () => { throw new Error("unreachable"); },
    backoff: { initialMs: 1000, maxMs: 4000, jitter: 0 }, ...options,
  });
}

