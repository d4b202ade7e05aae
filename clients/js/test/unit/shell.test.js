// The RollCall shell with a fake WebSocket and a fake clock: no broker, no network, no real time.
import { test } from "node:test";
import assert from "node:assert/strict";

import { FakeClock, settle, fakeBroker, client } from "../helpers/fake.js";

test("connects with ping and subscribe, then is connected; replies are matched by id", async () => {
  const clock = new FakeClock();
  const broker = fakeBroker();
  const rc = client(broker, clock);
  const states = [];
  rc.on("state", (s) => states.push(s));
  await settle();
  assert.deepEqual(states, ["connecting", "connected"]);
  assert.equal(broker.sockets[0].url, "ws://fake/v1/ws?token=t");
  assert.deepEqual(broker.sent.map((r) => r.op), ["ping", "subscribe"]);
  assert.deepEqual(broker.sent[1].topics, ["broker/"]);
  const [a, b] = await Promise.all([rc.query(["a"]), rc.query(["b"])]);
  assert.equal(a[0].user, "a");
  assert.equal(b[0].user, "b");
});

test("a lost connection is tried again at once, then with backoff on the injected clock; the session renews", async () => {
  const clock = new FakeClock();
  const broker = fakeBroker();
  const rc = client(broker, clock);
  const states = [];
  rc.on("state", (s) => states.push(s));
  const me = await rc.online({ user: "alice" });
  assert.equal(me.id, "s1");
  await clock.advance(5000);
  broker.up = false;
  broker.drop();
  await settle();
  assert.equal(rc.state, "reconnecting");
  assert.equal(broker.sockets.length, 2, "one attempt at once");
  await clock.advance(999);
  assert.equal(broker.sockets.length, 2);
  await clock.advance(1);
  assert.equal(broker.sockets.length, 3, "then after 1 s");
  await clock.advance(2000);
  assert.equal(broker.sockets.length, 4, "then after 2 s more");
  broker.up = true;
  const sentBefore = broker.sent.length;
  await clock.advance(4000);
  assert.equal(rc.state, "connected");
  assert.deepEqual(broker.sent.slice(sentBefore).map((r) => r.op), ["ping", "subscribe", "heartbeat"]);
  assert.equal(broker.sent.at(-1).session, "s1", "the old session is named on the new connection");
  assert.deepEqual(states, ["connecting", "connected", "reconnecting", "connected"]);
});

test("unknown_session after a reconnection: hello again with the status asked while disconnected", async () => {
  const clock = new FakeClock();
  const broker = fakeBroker();
  const rc = client(broker, clock);
  const me = await rc.online({ user: "alice" });
  await clock.advance(5000);
  broker.sessions.clear(); // the broker restarted
  broker.epoch = "e2";
  broker.drop();
  const asked = me.setStatus("busy", { text: "call" });
  await clock.advance(10);
  assert.deepEqual(await asked, { held: false });
  const hello = broker.sent.filter((r) => r.op === "hello").at(-1);
  assert.equal(hello.status, "busy");
  assert.equal(hello.text, "call");
  assert.equal(me.id, "s1", "the fake broker numbers sessions from its own count");
});

test("a request without a reply drops the connection after requestTimeoutMs", async () => {
  const clock = new FakeClock();
  const broker = fakeBroker();
  const rc = client(broker, clock, { requestTimeoutMs: 3000 });
  const states = [];
  rc.on("state", (s) => states.push(s));
  await settle();
  broker.silent = true;
  const answer = rc.ping().catch((e) => e);
  await settle();
  broker.silent = false; // the ping is lost, later requests are answered
  await clock.advance(2999);
  assert.equal(broker.sockets.length, 1);
  await clock.advance(1);
  assert.equal(broker.sockets.length, 2, "dropped and replaced at once");
  assert.deepEqual(states, ["connecting", "connected", "reconnecting", "connected"]);
  assert.equal((await answer).code, "timeout", "the request that went unanswered fails");
  assert.equal((await rc.ping()).broker, "fake");
});

test("records follow the seq rule and reach the store; broker heartbeats stop: {lost: true}", async () => {
  const clock = new FakeClock();
  const broker = fakeBroker();
  const rc = client(broker, clock);
  const seen = [];
  const beats = [];
  rc.on("broker", (b) => beats.push(b));
  rc.follow(["bob"], (r) => seen.push(r.seq));
  await settle();
  const ws = broker.sockets[0];
  ws.push("broker/", { broker: "fake", epoch: "e1", time: 9000, heartbeat_ms: 1000, dropped: 0 });
  ws.push("presence/bob/", { user: "bob", status: "away", seq: 9 });
  ws.push("presence/bob/", { user: "bob", status: "busy", seq: 8 });
  ws.push("presence/bob/", { user: "bob", status: "busy", seq: 9 });
  await settle();
  assert.deepEqual(seen, [7, 9], "the query's 7, then 9; 8 and the repeat of 9 dropped");
  assert.equal(rc.store.get("bob").status, "away");
  assert.equal(rc.now(), 9000);
  await clock.advance(3000);
  assert.deepEqual(beats.at(-1), { lost: true });
});

test("close says bye, closes the socket and stays closed", async () => {
  const clock = new FakeClock();
  const broker = fakeBroker();
  const rc = client(broker, clock);
  const me = await rc.online({ user: "alice" });
  await rc.close();
  assert.equal(broker.sent.at(-1).op, "bye");
  assert.equal(broker.sent.at(-1).session, me.id);
  assert.equal(rc.state, "closed");
  await clock.advance(60000);
  assert.equal(broker.sockets.length, 1);
});

test("the browser's online event skips the backoff (reconnectNow)", async () => {
  const listeners = {};
  globalThis.window = { addEventListener: (name, fn) => (listeners[name] = fn), removeEventListener: (name) => delete listeners[name] };
  try {
    const clock = new FakeClock();
    const broker = fakeBroker();
    broker.up = false;
    const rc = client(broker, clock, { backoff: { initialMs: 30000, jitter: 0 } });
    await settle();
    assert.equal(rc.state, "reconnecting");
    assert.equal(broker.sockets.length, 1);
    broker.up = true;
    listeners.online();
    await settle();
    assert.equal(broker.sockets.length, 2, "at once, not in 30 s");
    assert.equal(rc.state, "connected");
    await rc.close();
    assert.equal(listeners.online, undefined, "close removes the listener");
  } finally {
    delete globalThis.window;
  }
});

test("a follow made while the connection's subscribe is under way is subscribed before the client is ready", async () => {
  const clock = new FakeClock();
  const broker = fakeBroker();
  const rc = client(broker, clock);
  await Promise.resolve(); // the connection opens
  for (let i = 0; i < 6 && !broker.sent.some((r) => r.op === "subscribe"); i++) await Promise.resolve();
  assert.ok(broker.sent.some((r) => r.op === "subscribe"), "the handshake's subscribe is out");
  assert.notEqual(rc.state, "connected");
  rc.follow(["late"], () => {});
  await settle();
  assert.equal(rc.state, "connected");
  const topics = broker.sent.filter((r) => r.op === "subscribe").flatMap((r) => r.topics);
  assert.ok(topics.includes("presence/late/"), JSON.stringify(topics));
});

test("lifecycle: hidden → held away, visible → the status before (or the app's latest), pagehide → bye at once", async () => {
  const on = { doc: {}, win: {} };
  const fake = (registry) => ({ addEventListener: (n, fn) => (registry[n] = fn), removeEventListener: (n) => delete registry[n] });
  globalThis.window = fake(on.win);
  globalThis.document = { ...fake(on.doc), visibilityState: "visible" };
  try {
    const clock = new FakeClock();
    const broker = fakeBroker();
    const rc = client(broker, clock, { lifecycle: { hidden: "away", afterMs: 4000 } });
    const me = await rc.online({ user: "alice", text: "hi" });
    const statuses = () => broker.sent.filter((r) => r.op === "status").map(({ status, text, after_ms }) => ({ status, text, after_ms }));
    globalThis.document.visibilityState = "hidden";
    on.doc.visibilitychange();
    await settle();
    globalThis.document.visibilityState = "visible";
    on.doc.visibilitychange();
    await settle();
    assert.deepEqual(statuses(), [{ status: "away", text: "hi", after_ms: 4000 }, { status: "online", text: "hi", after_ms: undefined }]);
    globalThis.document.visibilityState = "hidden";
    on.doc.visibilitychange();
    await me.setStatus("busy"); // the app, while hidden
    globalThis.document.visibilityState = "visible";
    on.doc.visibilitychange();
    await settle();
    assert.deepEqual(statuses().slice(2).map((s) => s.status), ["away", "busy", "busy"], "back to the app's latest, not the status before");
    broker.silent = true; // a request under way does not hold the bye back
    me.setStatus("away");
    await settle();
    on.win.pagehide();
    assert.deepEqual(broker.sent.at(-1), { op: "bye", session: me.id, id: broker.sent.at(-1).id });
  } finally {
    delete globalThis.window;
    delete globalThis.document;
  }
});
