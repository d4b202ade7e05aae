// What a web team adopting the client runs into (the review of issue 25): each test failed before its fix. The
// shell over the fake WebSocket and the fake clock, or a machine alone.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Backoff, ConnectionMachine, SessionMachine, WatchMachine, Store } from "../../src/index.js";
import { FakeClock, settle, fakeBroker, client } from "../helpers/fake.js";

/** A JWT-shaped token with this `exp` (seconds); not signed (the fake broker does not check). */
function token(exp, tag = "") {
  const b64 = (value) => Buffer.from(JSON.stringify(value)).toString("base64url");
  return `${b64({ alg: "none" })}.${b64({ sub: "alice", exp, tag })}.x`;
}

/** The fake broker refuses, all or nothing as RollCall does, a subscribe naming a topic with a space. */
function refusingBadTopics(broker) {
  broker.handle = (request, reply) => {
    if (request.op === "subscribe" && request.topics.some((t) => t.includes(" "))) {
      Object.assign(reply, { ok: false, error: { code: "bad_request", message: "not a valid topic" } });
    }
    if (request.op === "query" && request.users.some((u) => u.includes(" "))) {
      Object.assign(reply, { ok: false, error: { code: "bad_user", message: "not a valid user id" } });
      delete reply.presence;
    }
  };
}

test("a follow the broker refuses (an invalid user id) does not keep the client from connecting", async () => {
  const clock = new FakeClock();
  const broker = fakeBroker();
  refusingBadTopics(broker);
  const rc = client(broker, clock);
  const errors = [];
  rc.on("error", (e) => errors.push(e));
  const bob = [];
  rc.follow(["bob", "bad id"], (r) => bob.push(r));
  const me = rc.online({ user: "alice" });
  await clock.advance(10);
  assert.equal(rc.state, "connected", "before: the refused subscribe dropped every connection, for ever");
  assert.equal((await me).id, "s1");
  assert.equal(broker.sockets.length, 1);
  assert.ok(errors.some((e) => e.code === "bad_request" && e.message.includes("presence/bad id/")), errors.map((e) => e.message).join());
  assert.deepEqual(bob.map((r) => r.user), ["bob"], "bob is read again (the refused user is left out of the query)");
  const subscribed = broker.sent.filter((r) => r.op === "subscribe" && r.topics.every((t) => !t.includes(" "))).flatMap((r) => r.topics);
  assert.ok(subscribed.includes("presence/bob/"));
});

test("on a live connection a refused topic does not take the follow's good topics with it", async () => {
  const clock = new FakeClock();
  const broker = fakeBroker();
  refusingBadTopics(broker);
  const rc = client(broker, clock);
  const errors = [];
  rc.on("error", (e) => errors.push(e));
  await settle();
  assert.equal(rc.state, "connected");
  rc.follow(["carol", "bad x"], () => {});
  await settle();
  const subscribed = broker.sent.filter((r) => r.op === "subscribe" && r.topics.every((t) => !t.includes(" "))).flatMap((r) => r.topics);
  assert.ok(subscribed.includes("presence/carol/"), JSON.stringify(broker.sent.filter((r) => r.op === "subscribe")));
  assert.equal(errors.length, 1);
  assert.match(errors[0].message, /presence\/bad x\//);
});

test("a token provider that hands out an expired token is not asked again in a loop", async () => {
  const clock = new FakeClock(); // 1970: a token with exp 0 has expired
  const broker = fakeBroker();
  let asked = 0;
  const rc = client(broker, clock, { token: undefined, getToken: async () => (++asked > 20 ? new Promise(() => {}) : token(0)) });
  for (let i = 0; i < 50; i++) await settle();
  assert.ok(asked <= 2, `getToken asked ${asked} times without the clock moving (before: a hot loop)`);
  await rc.close();
});

test("a client clock running ahead: a token that looks expired is tried, and the broker decides", async () => {
  const clock = new FakeClock();
  clock.time = 10_000_000; // the client's clock: 10,000 s; the token expires at 3,600 s (the fake broker takes it)
  const broker = fakeBroker();
  let asked = 0; // a loop is broken after 20 tokens, for the assertion
  const rc = client(broker, clock, { token: undefined, getToken: async () => (++asked > 20 ? new Promise(() => {}) : token(3600)) });
  await clock.advance(10);
  for (let i = 0; i < 5; i++) await settle();
  assert.equal(rc.state, "connected", "before: never connected (a hot loop of getToken)");
  await clock.advance(10000);
  assert.equal(asked, 2, "and no refresh by this clock (it would loop): the broker's 4001 brings the next token");
  await rc.close();
});

test("a provider that returns the same cached token near its exp does not loop on auth", async () => {
  const clock = new FakeClock();
  clock.time = 100_000;
  const broker = fakeBroker();
  const same = token(103); // exp 3 s after the clock
  let auths = 0;
  broker.handle = (request) => {
    if (request.op === "ping") return; // time stays the fake's 5000: no matter, exp is compared on the client clock
    if (request.op === "auth") {
      auths += 1;
      if (auths > 30) return false; // break a loop for the assertion below
    }
  };
  const rc = client(broker, clock, { token: undefined, getToken: async () => same });
  broker.handle = ((inner) => (request, reply) => {
    if (request.op === "ping") reply.time = clock.now(); // the broker's clock is the client's
    return inner(request, reply);
  })(broker.handle);
  await settle();
  assert.equal(rc.state, "connected");
  await clock.advance(2500);
  assert.ok(auths >= 1 && auths <= 3, `${auths} auth requests in 2.5 s with one token (before: one per turn of the loop)`);
  await rc.close();
});

test("a status the broker refused is not asked again in the next hello (it would end the session)", async () => {
  const clock = new FakeClock();
  const broker = fakeBroker();
  broker.handle = (request, reply) => {
    if ((request.op === "status" || request.op === "hello") && (request.text ?? "").length > 256) {
      Object.assign(reply, { ok: false, error: { code: "bad_request", message: "text too long" } });
      delete reply.session;
    }
  };
  const rc = client(broker, clock);
  rc.on("error", () => {});
  const me = await rc.online({ user: "alice", text: "hi" });
  await assert.rejects(me.setStatus("busy", { text: "x".repeat(300) }), (e) => e.code === "bad_request");
  assert.equal(me.status, "online", "the status asked last that the broker took");
  await clock.advance(5000);
  broker.sessions.clear(); // the session ended meanwhile
  broker.drop();
  await clock.advance(10);
  const hello = broker.sent.filter((r) => r.op === "hello").at(-1);
  assert.deepEqual([hello.status, hello.text], ["online", "hi"]);
  assert.equal(rc.sessions.length, 1, "the session lives on (before: its hello was refused and it ended)");
});

test("rc.group() reads every page of a large group, as the docs promise of the RollCall clients", async () => {
  const clock = new FakeClock();
  const broker = fakeBroker();
  const members = ["a", "b", "c", "d", "e"];
  broker.handle = (request, reply) => {
    if (request.op !== "group") return;
    const from = request.after ? members.indexOf(request.after) + 1 : 0;
    const page = members.slice(from, from + 2);
    Object.assign(reply, {
      group: request.group, online: 5, total: 5, counts: { online: 5, busy: 0, away: 0, offline: 0 }, seq: 10,
      members: Object.fromEntries(page.map((u) => [u, { user: u, status: "online", seq: 1 }])),
    });
    if (from + 2 < members.length) reply.next = page.at(-1);
  };
  const rc = client(broker, clock);
  const reply = await rc.group("team");
  assert.deepEqual(Object.keys(reply.members).sort(), members, "before: the first page only");
  assert.equal(reply.next, undefined);
  const page = await rc.group("team", { after: "b" });
  assert.deepEqual(Object.keys(page.members), ["c", "d"], "an explicit `after` is one page, as asked");
  await rc.close();
});

test("a growing `dropped` resyncs at most once a second, backing off while it keeps growing (protocol §8.4)", async () => {
  const clock = new FakeClock();
  const broker = fakeBroker();
  const rc = client(broker, clock);
  rc.follow(["bob"], () => {});
  await settle();
  const queries = () => broker.sent.filter((r) => r.op === "query").length;
  const before = queries();
  const ws = broker.sockets[0];
  for (let i = 1; i <= 20; i++) {
    ws.push("broker/", { broker: "fake", epoch: "e1", time: 5000 + i * 500, heartbeat_ms: 1000, dropped: i });
    await clock.advance(500);
  }
  const resyncs = queries() - before;
  assert.ok(resyncs >= 2 && resyncs <= 5, `${resyncs} resyncs in 10 s of growing dropped (before: one per heartbeat, 20)`);
  await rc.close();
});

test("WatchMachine: a resync held back by the pause comes due later, not never", () => {
  const watch = new WatchMachine(new Store());
  assert.equal(watch.heartbeat({ dropped: 0, heartbeat_ms: 1000 }, 0), false);
  assert.equal(watch.heartbeat({ dropped: 1, heartbeat_ms: 1000 }, 100), true, "the first growth: at once");
  assert.equal(watch.heartbeat({ dropped: 2, heartbeat_ms: 1000 }, 200), false, "within the pause: later");
  assert.ok(watch.deadline() !== null && watch.deadline() <= 100 + 2000);
  assert.equal(watch.resyncDue(watch.deadline()), true);
  assert.equal(watch.resyncDue(watch.deadline() + 1), false, "once");
});

test("online() rejected by `unauthorized` does not come back later as a session the app thinks failed", async () => {
  const clock = new FakeClock();
  const broker = fakeBroker();
  broker.up = false;
  const rc = client(broker, clock, { fetch: async () => ({ status: 401 }) });
  const me = rc.online({ user: "alice" });
  await assert.rejects(me, (e) => e.code === "unauthorized");
  assert.equal(rc.state, "closed");
  broker.up = true;
  rc.reconnectNow();
  await clock.advance(10);
  assert.equal(rc.state, "connected");
  assert.equal(broker.sent.filter((r) => r.op === "hello").length, 0, "before: the rejected session said hello");
  assert.deepEqual(rc.sessions, []);
  await rc.close();
});

test("SessionMachine: a refused status goes back to what the broker has", () => {
  const m = new SessionMachine({ user: "alice", status: "online", text: "hi" });
  m.connectionOpened();
  m.next(0);
  m.replied({ reply: { session: "s1", heartbeat_ms: 1000 } }, 0);
  m.setStatus("busy", "y".repeat(300), undefined, 1);
  assert.equal(m.next(1).op, "status");
  m.replied({ error: { code: "bad_request", message: "text too long" } }, 2);
  assert.deepEqual([m.desired.status, m.desired.text], ["online", "hi"]);
  assert.equal(m.next(3), null, "nothing more to send");
});

test("the store tells its subscribers once per message or read, not once per member (no storm on a group read)", async () => {
  const clock = new FakeClock();
  const broker = fakeBroker();
  const members = Array.from({ length: 50 }, (_, i) => `m${String(i).padStart(2, "0")}`);
  broker.handle = (request, reply) => {
    if (request.op !== "group") return;
    Object.assign(reply, {
      group: request.group, online: 50, total: 50, counts: { online: 50, busy: 0, away: 0, offline: 0 }, seq: 10,
      members: Object.fromEntries(members.map((u) => [u, { user: u, status: "online", seq: 3 }])),
    });
  };
  const rc = client(broker, clock);
  rc.follow(members.slice(0, 20), () => {});
  await settle();
  const calls = [];
  const stop = rc.store.subscribe((change) => calls.push(change));
  rc.followGroup("team", () => {});
  await settle();
  assert.equal(Object.keys(rc.store.group("team").members).length, 50);
  assert.equal(calls.length, 1, `${calls.length} notifications for one group read (before: 51)`);
  assert.deepEqual(calls[0].groups, ["team"]);
  assert.equal(calls[0].users.length, 30, "the 30 members not followed before are news; the 20 others had seq 7");
  calls.length = 0;
  broker.sockets[0].push("group/team/", {
    group: "team", online: 49, total: 50, counts: { online: 49, busy: 0, away: 0, offline: 1 }, seq: 11, removed: [],
    changed: [{ user: "m01", status: "offline", seq: 9 }, { user: "m30", status: "offline", seq: 9 }],
  });
  assert.equal(calls.length, 1, "one group message, one notification");
  assert.deepEqual([calls[0].users.sort(), calls[0].groups], [["m01", "m30"], ["team"]]);
  stop();
  broker.sockets[0].push("presence/m02/", { user: "m02", status: "away", seq: 12 });
  assert.equal(calls.length, 1, "unsubscribed");
  await rc.close();
});

test("a follow callback that throws does not keep the record from the other follows, nor stop later ones", async () => {
  const reported = [];
  globalThis.reportError = (error) => reported.push(error); // a browser's: where the client reports it
  try {
    const clock = new FakeClock();
    const broker = fakeBroker();
    const rc = client(broker, clock);
    const other = [];
    rc.follow(["bob"], (r) => {
      if (r.seq === 9) throw new Error("the app's bug");
    });
    rc.follow(["bob"], (r) => other.push(r.seq));
    const views = [];
    rc.followGroup("team", () => {
      throw new Error("the app's other bug");
    });
    rc.followGroup("team", (g) => views.push(g.seq));
    await settle();
    const ws = broker.sockets[0];
    ws.push("presence/bob/", { user: "bob", status: "away", seq: 9 });
    ws.push("presence/bob/", { user: "bob", status: "busy", seq: 10 });
    ws.push("group/team/", { group: "team", online: 0, total: 0, counts: {}, changed: [], removed: [], seq: 4 });
    await settle();
    assert.deepEqual(other, [7, 9, 10], "before: 9 never reached the second follow (the first threw in between)");
    assert.ok(views.includes(4));
    assert.ok(reported.some((e) => e.message === "the app's bug"), "reported, not swallowed");
    assert.ok(reported.some((e) => e.message === "the app's other bug"));
    await rc.close();
  } finally {
    delete globalThis.reportError;
  }
});

test("a token provider that never answers is given up on after requestTimeoutMs, and asked again", async () => {
  const clock = new FakeClock();
  const broker = fakeBroker();
  let asked = 0;
  const rc = client(broker, clock, { token: undefined, requestTimeoutMs: 3000, getToken: () => (++asked === 1 ? new Promise(() => {}) : "t2") });
  const errors = [];
  rc.on("state", (state, error) => error && errors.push(error.code));
  await settle();
  assert.equal(rc.state, "connecting");
  await clock.advance(3000);
  assert.ok(errors.includes("token_provider"), JSON.stringify(errors));
  await clock.advance(1000); // the backoff
  assert.equal(asked, 2);
  assert.equal(rc.state, "connected", "before: stuck connecting for ever, reconnectNow() ignored");
  await rc.close();
});

test("bye() while the connection is down is said once it is back (not left to the grace period)", async () => {
  const clock = new FakeClock();
  const broker = fakeBroker();
  const rc = client(broker, clock);
  const me = await rc.online({ user: "alice" });
  await clock.advance(5000);
  broker.up = false;
  broker.drop();
  await settle();
  assert.equal(rc.state, "reconnecting");
  await me.bye(); // resolves: the session has ended for the app
  assert.deepEqual(rc.sessions, []);
  broker.up = true;
  await clock.advance(2000);
  assert.equal(rc.state, "connected");
  const bye = broker.sent.find((r) => r.op === "bye");
  assert.equal(bye?.session, "s1", "before: no bye; the broker kept the session for its grace period, reason closed");
  await rc.close();
});

test("a URL the WebSocket refuses to parse ends the client (bad_url) rather than retrying for ever", async () => {
  const clock = new FakeClock();
  const broker = fakeBroker();
  const Throwing = class {
    constructor() {
      throw new SyntaxError("The URL's scheme must be either 'ws' or 'wss'");
    }
  };
  const rc = client(broker, clock, { WebSocket: Throwing });
  const me = rc.online({ user: "alice" });
  await clock.advance(60000);
  assert.equal(rc.state, "closed");
  assert.equal(rc.error?.code, "bad_url");
  await assert.rejects(me, (e) => e.code === "bad_url");
});

test("lifecycle: hiding the tab never makes an invisible or offline session show away", async () => {
  const on = { doc: {}, win: {} };
  const fake = (registry) => ({ addEventListener: (n, fn) => (registry[n] = fn), removeEventListener: (n) => delete registry[n] });
  globalThis.window = fake(on.win);
  globalThis.document = { ...fake(on.doc), visibilityState: "visible" };
  try {
    const clock = new FakeClock();
    const broker = fakeBroker();
    const rc = client(broker, clock, { lifecycle: true });
    const ghost = await rc.online({ user: "ghost", status: "invisible" });
    const quiet = await rc.online({ user: "quiet", status: "offline" });
    const busy = await rc.online({ user: "busy", status: "busy" });
    globalThis.document.visibilityState = "hidden";
    on.doc.visibilitychange();
    await settle();
    const statuses = broker.sent.filter((r) => r.op === "status");
    assert.deepEqual(statuses.map((r) => [r.session, r.status]), [[busy.id, "away"]], "before: the invisible user was made away, seen by everyone 5 s later");
    assert.equal(ghost.status, "invisible");
    assert.equal(quiet.status, "offline");
    globalThis.document.visibilityState = "visible";
    on.doc.visibilitychange();
    await settle();
    assert.deepEqual(broker.sent.filter((r) => r.op === "status").map((r) => r.status), ["away", "busy"]);
    await rc.close();
  } finally {
    delete globalThis.window;
    delete globalThis.document;
  }
});

test("ConnectionMachine: reconnectNow() during a failing attempt (the browser's online event) is not lost", () => {
  const m = new ConnectionMachine({ backoff: new Backoff({ initialMs: 30000, jitter: 0 }) });
  assert.deepEqual(m.start(), ["connect"]);
  assert.deepEqual(m.reconnectNow(5), [], "an attempt is under way (its probe, say)");
  assert.deepEqual(m.failed(10, { httpStatus: null }), ["connect"], "before: the next attempt waited the whole 30 s backoff");
  assert.deepEqual(m.failed(20, { httpStatus: null }), [], "once: the next failure backs off again");
  assert.equal(m.deadline(), 20 + 30000, "from the start of the backoff, as reconnectNow resets it");
});

test("close() leaves no timer behind (a Node process must exit), also while getToken hangs", async () => {
  for (const hang of [false, true]) {
    const clock = new FakeClock();
    const broker = fakeBroker();
    const rc = client(broker, clock, hang ? { token: undefined, getToken: () => new Promise(() => {}) } : {});
    if (!hang) {
      const me = await rc.online({ user: "alice", keepalive: "ttl" });
      rc.follow(["bob"], () => {});
      broker.sockets[0].push("broker/", { broker: "fake", epoch: "e1", time: 5000, heartbeat_ms: 1000, dropped: 0 });
      await me.setStatus("away", { afterMs: 5000 });
    }
    await settle();
    await rc.close();
    assert.deepEqual([...clock.timers.values()].map((t) => t.at), [], `timers left after close (getToken hangs: ${hang})`);
  }
});

test("a group refused at the subscription cap, followed again once there is room, is read", async () => {
  const clock = new FakeClock();
  const broker = fakeBroker();
  const held = new Set();
  broker.handle = (request, reply) => {
    if (request.op === "subscribe") {
      const fresh = request.topics.filter((t) => !held.has(t));
      if (held.size + fresh.length > 2) return void Object.assign(reply, { ok: false, error: { code: "limit", message: "too many topics" } });
      for (const t of fresh) held.add(t);
    }
    if (request.op === "unsubscribe") for (const t of request.topics) held.delete(t);
    if (request.op === "group") {
      Object.assign(reply, { group: request.group, online: 1, total: 1, counts: { online: 1, busy: 0, away: 0, offline: 0 }, seq: 5, members: { m: { user: "m", status: "online", seq: 2 } } });
    }
  };
  const rc = client(broker, clock);
  rc.on("error", () => {});
  const stopBob = rc.follow(["bob"], () => {}); // broker/ and bob: the cap of 2
  await settle();
  const stop = rc.followGroup("team", () => {});
  await settle();
  assert.equal(rc.store.group("team"), undefined, "refused: limit");
  stop();
  stopBob();
  await settle();
  const views = [];
  rc.followGroup("team", (g) => views.push(g));
  await settle();
  assert.ok(views.some((g) => g.members?.m), "before: the group was still taken for refused, and never read");
  await rc.close();
});
