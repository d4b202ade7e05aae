import { test } from "node:test";
import assert from "node:assert/strict";
import { SessionMachine } from "../../src/index.js";

const ok = (reply = {}) => ({ reply: { ok: true, ...reply } });
const refused = (code) => ({ error: { code, message: code } });

function live(options = {}) {
  const m = new SessionMachine({ user: "alice", ...options });
  m.connectionOpened();
  const hello = m.next(0);
  assert.equal(hello.op, "hello");
  m.replied(ok({ session: "s1", heartbeat_ms: 1000, ttl_ms: 3000 }), 0);
  return m;
}

test("says hello once connected, with keepalive connection by default, and nothing more while idle", () => {
  const m = new SessionMachine({ user: "alice", status: "busy", text: "call" });
  assert.equal(m.next(0), null, "not connected");
  m.connectionOpened();
  assert.deepEqual(m.next(0), { op: "hello", user: "alice", status: "busy", text: "call", keepalive: "connection" });
  assert.equal(m.next(0), null, "one request at a time");
  const events = m.replied(ok({ session: "s1", heartbeat_ms: 1000 }), 0);
  assert.deepEqual(events[0], { type: "granted", first: true, session: "s1" });
  assert.equal(m.next(1e9), null, "no heartbeats with keepalive connection");
  assert.equal(m.deadline(), null);
});

test("heartbeats at the granted interval with keepalive ttl", () => {
  const m = live({ keepalive: "ttl" });
  assert.equal(m.deadline(), 1000);
  assert.equal(m.next(999), null);
  assert.deepEqual(m.next(1000), { op: "heartbeat", session: "s1" });
  m.replied(ok(), 1005);
  assert.equal(m.deadline(), 2005);
});

test("only the latest status goes out when several were asked during a request", () => {
  const m = live();
  m.setStatus("away", null, null, 1);
  assert.deepEqual(m.next(1), { op: "status", session: "s1", status: "away", text: null });
  m.setStatus("busy", "a", null, 2);
  const v = m.setStatus("online", "b", null, 3);
  assert.equal(m.next(3), null);
  assert.deepEqual(m.replied(ok(), 4), [{ type: "acked", version: 2, held: false }]);
  assert.deepEqual(m.next(4), { op: "status", session: "s1", status: "online", text: "b" });
  assert.deepEqual(m.replied(ok(), 5), [{ type: "acked", version: v, held: false }]);
  assert.equal(m.next(5), null);
});

test("afterMs is sent as after_ms and the held reply is remembered", () => {
  const m = live();
  m.setStatus("offline", null, 5000, 100);
  assert.deepEqual(m.next(100), { op: "status", session: "s1", status: "offline", text: null, after_ms: 5000 });
  assert.deepEqual(m.replied(ok({ held: true }), 101), [{ type: "acked", version: 2, held: true }]);
  assert.equal(m.held, true);
  m.setStatus("online", null, null, 200);
  m.next(200);
  m.replied(ok(), 201);
  assert.equal(m.held, false);
});

test("a new connection renews the session by naming it (a heartbeat), within the grace period", () => {
  const m = live();
  m.connectionLost();
  assert.equal(m.next(10), null);
  m.connectionOpened();
  assert.deepEqual(m.next(20), { op: "heartbeat", session: "s1" });
  m.replied(ok(), 21);
  assert.equal(m.next(22), null);
});

test("a status asked while disconnected is what renews the session", () => {
  const m = live();
  m.connectionLost();
  m.setStatus("busy", null, null, 10);
  m.connectionOpened();
  assert.deepEqual(m.next(20), { op: "status", session: "s1", status: "busy", text: null });
});

test("unknown_session: hello again with the status asked for last", () => {
  const m = live();
  m.setStatus("away", "lunch", null, 1);
  m.connectionLost();
  m.connectionOpened();
  m.next(10);
  assert.deepEqual(m.replied(refused("unknown_session"), 11), []);
  assert.deepEqual(m.next(11), { op: "hello", user: "alice", status: "away", text: "lunch", keepalive: "connection" });
  const events = m.replied(ok({ session: "s2", heartbeat_ms: 1000 }), 12);
  assert.equal(events[0].first, false);
  assert.equal(m.session, "s2");
  assert.equal(m.next(12), null, "the hello carried the status");
});

test("unknown_session with a held status not yet due: hello with the status before, then the rest of the delay", () => {
  const m = live();
  m.setStatus("away", null, 5000, 1000);
  m.next(1000);
  m.replied(ok({ held: true }), 1001);
  m.connectionLost();
  m.connectionOpened();
  m.next(3000);
  m.replied(refused("unknown_session"), 3000);
  assert.equal(m.next(3000).status, "online", "not published early");
  m.replied(ok({ session: "s2", heartbeat_ms: 1000 }), 3001);
  assert.deepEqual(m.next(3001), { op: "status", session: "s2", status: "away", text: null, after_ms: 2999 });
});

test("unknown_session after the held delay: hello with the held status itself", () => {
  const m = live();
  m.setStatus("away", null, 5000, 1000);
  m.next(1000);
  m.replied(ok({ held: true }), 1001);
  m.connectionLost();
  m.connectionOpened();
  m.next(9000);
  m.replied(refused("unknown_session"), 9000);
  assert.equal(m.next(9000).status, "away");
});

test("a refused status is dropped, the session stays", () => {
  const m = live();
  const v = m.setStatus("online", "x".repeat(300), null, 1);
  m.next(1);
  assert.deepEqual(m.replied(refused("bad_request"), 2), [
    { type: "refused", version: v, error: { code: "bad_request", message: "bad_request" } },
  ]);
  assert.equal(m.next(3), null);
  assert.equal(m.phase, "live");
});

test("a refused first hello ends the session", () => {
  const m = new SessionMachine({ user: "bob" });
  m.connectionOpened();
  m.next(0);
  const [event] = m.replied(refused("forbidden"), 1);
  assert.equal(event.type, "ended");
  assert.equal(event.first, true);
  assert.equal(m.phase, "closed");
});

test("close says bye when connected, and ends without one when not", () => {
  const m = live();
  m.close();
  assert.deepEqual(m.next(1), { op: "bye", session: "s1" });
  assert.deepEqual(m.replied(ok(), 2), [{ type: "ended" }]);
  const n = live();
  n.connectionLost();
  n.close();
  assert.equal(n.phase, "closed");
});
