// The client against a real `rollcall serve --test-mode --ws-endpoint` with real tokens, and a ZeroMQ subscriber
// (python3 + pyzmq) that sees the same records on the update endpoint.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { RollCall, RollCallError } from "../../src/index.js";
import { Broker, makeToken } from "../helpers/broker.js";
import { ZmqWatcher } from "../helpers/zmq.js";
import { Recorder, until, within } from "../helpers/wait.js";

describe("against a test-mode broker", () => {
  let broker;
  const watchers = [];
  const watch = (...topics) => {
    const watcher = new ZmqWatcher(broker.endpoints.update, topics);
    watchers.push(watcher);
    return watcher.started();
  };
  const as = (sub, options = {}) => broker.client({ sub, role: options.role ?? "user", ...options });

  before(async () => {
    broker = await new Broker().start();
  });
  after(async () => {
    for (const watcher of watchers) watcher.stop();
    await broker?.stop();
  });

  test("online and offline reach a ZeroMQ subscriber and a follower with the same seq", async () => {
    const zmq = await watch("presence/alice/");
    const viewer = as("viewer");
    const followed = new Recorder();
    viewer.follow(["alice"], followed.fn);
    await followed.find((r) => r.seq === 0, "alice's unknown record, first");
    const rc = as("alice");
    const states = new Recorder();
    rc.on("state", states.fn);
    const me = await rc.online({ user: "alice", status: "busy", text: "in a call" });
    assert.equal(rc.state, "connected");
    assert.deepEqual(states.items, ["connecting", "connected"]);
    assert.match(me.id, /^[0-9a-f]{24}$/);
    const online = await zmq.find((r) => r.status === "busy", "alice busy on ZeroMQ");
    assert.equal(online.text, "in a call");
    const seen = await followed.find((r) => r.status === "busy", "alice busy for the follower");
    assert.equal(seen.seq, online.seq);
    assert.deepEqual(rc.store.get("alice"), undefined, "rc follows nobody");
    await me.bye();
    const offline = await zmq.find((r) => r.status === "offline" && r.seq > online.seq, "alice offline on ZeroMQ");
    assert.equal(offline.reason, "bye");
    const gone = await followed.find((r) => r.status === "offline" && r.seq > 0, "alice offline for the follower");
    assert.equal(gone.seq, offline.seq);
    assert.deepEqual(viewer.store.get("alice"), gone);
  });

  test("follow and unfollow on a live connection; a second follow gets the current record at once", async () => {
    const bob = await as("bob").online({ user: "bob" });
    const carol = await as("carol").online({ user: "carol" });
    const viewer = as("viewer2");
    const first = new Recorder();
    const stop = viewer.follow(["bob", "carol"], first.fn);
    await first.find((r) => r.user === "bob" && r.status === "online", "bob online");
    await first.find((r) => r.user === "carol" && r.status === "online", "carol online");
    const second = new Recorder();
    const stopSecond = viewer.follow("bob", second.fn);
    await second.find((r) => r.user === "bob" && r.status === "online", "bob's current record for the second follow");
    stop("bob"); // bob is still followed by the second follow
    stopSecond(); // now by nobody: unsubscribed
    assert.equal(viewer.store.get("bob"), undefined);
    const from = first.items.length;
    await bob.setStatus("away");
    await carol.setStatus("busy");
    // Updates come in order on one connection: once carol's change is here, bob's would have come before it.
    await first.find((r) => r.user === "carol" && r.status === "busy", "carol busy", 10000, from);
    assert.deepEqual(first.items.slice(from).filter((r) => r.user === "bob"), []);
    assert.deepEqual(second.items.filter((r) => r.status === "away"), []);
    assert.equal(viewer.store.get("carol").status, "busy");
    const stopAgain = viewer.follow(["bob"], second.fn);
    await second.find((r) => r.status === "away", "bob's current record after following again");
    stopAgain();
  });

  test("a group: the whole view first, then its messages; 3 of 5 online", async () => {
    const operator = broker.client();
    await operator.group("team", { members: ["g-alice", "g-bob", "g-carol", "g-dave", "g-erin"] });
    await as("g-alice").online({ user: "g-alice" });
    await as("g-bob").online({ user: "g-bob", status: "busy" });
    const viewer = as("g-erin"); // a member (a user token reads only its user's groups); erin stays offline
    const seen = new Recorder();
    const stop = viewer.followGroup("team", seen.fn);
    const view = await seen.find((g) => g.members && g.online === 2, "the group read");
    assert.equal(view.total, 5);
    assert.equal(Object.keys(view.members).length, 5);
    assert.equal(view.members["g-bob"].status, "busy");
    await as("g-carol").online({ user: "g-carol", status: "away" });
    await broker.advance(100); // the group's batch window (50 ms) runs on the test-mode clock
    const message = await seen.find((g) => g.changed?.some((r) => r.user === "g-carol"), "carol's change");
    assert.equal(message.online, 3);
    assert.equal(viewer.store.group("team").online, 3);
    assert.equal(viewer.store.group("team").members["g-carol"].status, "away");
    assert.equal(viewer.store.get("g-carol").status, "away");
    const seqs = seen.items.map((g) => g.seq);
    assert.deepEqual([...seqs].sort((a, b) => a - b), seqs, "group seqs never go back");
    stop();
    assert.equal(viewer.store.group("team"), undefined);
  });

  test("a follow of an invalid user id is reported, and does not keep the client from connecting (review)", async () => {
    const rc = as("r-alice");
    const errors = new Recorder();
    rc.on("error", errors.fn);
    const seen = new Recorder();
    rc.follow(["r-bob", "bad id!"], seen.fn);
    const me = await within(rc.online({ user: "r-alice" }), "r-alice granted (before: never, the client reconnecting for ever)");
    assert.equal(rc.state, "connected");
    assert.match(me.id, /^[0-9a-f]{24}$/);
    const error = await errors.find((e) => e.message.includes("presence/bad id!/"), "the refused topic reported");
    assert.equal(error.code, "bad_request");
    await seen.find((r) => r.user === "r-bob", "r-bob's record all the same");
    await as("r-bob").online({ user: "r-bob", status: "busy" });
    await seen.find((r) => r.user === "r-bob" && r.status === "busy", "r-bob's change: subscribed");
  });

  test("rc.group() answers every page of a group larger than one reply; the store tells once per read (review)", async () => {
    const members = Array.from({ length: 700 }, (_, i) => `p${String(i).padStart(4, "0")}`);
    const operator = broker.client();
    const defined = await operator.group("big", { members });
    assert.equal(Object.keys(defined.members).length, 700, "before: the first page only (about 600)");
    assert.equal(defined.next, undefined);
    const viewer = as("p0000"); // a member: a user token reads only its user's groups
    const changes = [];
    viewer.store.subscribe((change) => changes.push(change));
    const seen = new Recorder();
    viewer.followGroup("big", seen.fn);
    await seen.find((g) => g.members && Object.keys(g.members).length === 700, "the whole group read");
    const reads = changes.filter((c) => c.users.length > 0);
    assert.equal(reads.length, 1, `one notification for the 700 members (${changes.length} in all)`);
  });

  test("query answers records, unknown users with seq 0", async () => {
    const rc = as("asker");
    await as("q-bob").online({ user: "q-bob", status: "busy", text: "x" });
    const [bob, zoe] = await rc.query(["q-bob", "q-zoe"]);
    assert.equal(bob.status, "busy");
    assert.equal(bob.text, "x");
    assert.deepEqual(zoe, { user: "q-zoe", status: "offline", since: null, last_seen: null, sessions: 0, seq: 0 });
    const pong = await rc.ping();
    assert.equal(pong.test_mode, true);
    assert.equal(pong.epoch, broker.endpoints.epoch);
  });

  test("forbidden is an Error with the broker's code and message", async () => {
    const rc = as("mallory");
    const error = await rc.online({ user: "alice" }).then(() => null, (e) => e);
    assert.ok(error instanceof RollCallError);
    assert.ok(error instanceof Error);
    assert.equal(error.code, "forbidden");
    assert.ok(error.message.length > 0);
    const edit = await rc.group("team", { add: ["mallory"] }).then(() => null, (e) => e);
    assert.equal(edit?.code, "forbidden");
    const reader = as("reader", { role: "reader" });
    assert.equal((await reader.online({ user: "reader" }).catch((e) => e)).code, "forbidden");
    assert.equal(rc.state, "connected", "a refusal does not touch the connection");
  });

  test("a token refused at the upgrade (401) ends in state closed with unauthorized after three attempts", async () => {
    let sockets = 0;
    const Counting = class extends WebSocket {
      constructor(...args) {
        super(...args);
        sockets += 1;
      }
    };
    const fixed = new RollCall(broker.url, { token: makeToken("not the broker's secret, 32 bytes!", { sub: "x" }), WebSocket: Counting });
    const states = new Recorder();
    fixed.on("state", (state, error) => states.fn({ state, code: error?.code }));
    await states.find((s) => s.state === "closed", "closed");
    assert.deepEqual(states.items.at(-1), { state: "closed", code: "unauthorized" });
    assert.equal(fixed.error.code, "unauthorized");
    // A WebSocket cannot read the 401; the probe over HTTP gets 426 (the broker checks tokens on upgrades only),
    // so the refusal is presumed after three in a row.
    assert.equal(sockets, 3);
    assert.equal((await fixed.query(["a"]).catch((e) => e)).code, "unauthorized", "calls fail with why");
    assert.equal((await fixed.online({ user: "x" }).catch((e) => e)).code, "unauthorized");

    let asked = 0;
    const other = new RollCall(broker.url, {
      getToken: async () => (asked += 1, "not-a-jwt"), WebSocket: Counting, backoff: { initialMs: 50 },
    });
    await until(() => other.state === "closed", "closed with getToken");
    assert.equal(other.error.code, "unauthorized");
    assert.equal(asked, 3, "a fresh token for each attempt, then closed");
    assert.equal(sockets, 6);

    const expired = new RollCall(broker.url, { token: broker.token("x", { expiresIn: -10 }), WebSocket: Counting });
    await until(() => expired.state === "closed", "closed with an expired token");
    assert.equal(expired.error.code, "token_expired");
    assert.equal(sockets, 6, "an expired token is not even tried");
    await Promise.all([fixed.close(), other.close(), expired.close()]);
  });

  test("afterMs: held by the broker, published only when due on its clock, cancelled by the status before", async () => {
    const zmq = await watch("presence/held/");
    const rc = as("held");
    const me = await rc.online({ user: "held" });
    const online = await zmq.find((r) => r.status === "online", "held online");
    assert.deepEqual(await me.setStatus("offline", { afterMs: 5000 }), { held: true });
    assert.equal(me.held, true);
    await broker.advance(4000);
    let [now] = await rc.query(["held"]);
    assert.equal(now.status, "online", "not yet due");
    assert.equal(now.seq, online.seq);
    await broker.advance(1500);
    const offline = await zmq.find((r) => r.status === "offline" && r.seq > online.seq, "held offline once due");
    assert.equal(offline.reason, "status");

    assert.deepEqual(await me.setStatus("online"), { held: false });
    const back = await zmq.find((r) => r.status === "online" && r.seq > offline.seq, "online again");
    assert.deepEqual(await me.setStatus("away", { afterMs: 5000 }), { held: true });
    assert.deepEqual(await me.setStatus("online"), { held: false }, "back to what it has: the held change is cancelled");
    await broker.advance(10000);
    [now] = await rc.query(["held"]);
    assert.equal(now.status, "online");
    assert.equal(now.seq, back.seq, "nothing was published: no flicker");
    assert.deepEqual(zmq.records("held").filter((r) => r.seq > back.seq), []);
  });

  test("getToken is asked again before exp and presented with auth (one connection outlives its tokens); 4001 brings a fresh one", async () => {
    const minted = [];
    let firstExp = null;
    let sockets = 0;
    const Counting = class extends WebSocket {
      constructor(...args) {
        super(...args);
        sockets += 1;
      }
    };
    const rc = new RollCall(broker.url, {
      WebSocket: Counting,
      getToken: async () => {
        const token = broker.token("short", { expiresIn: 3 });
        firstExp ??= JSON.parse(Buffer.from(token.split(".")[1], "base64url")).exp * 1000;
        minted.push(Date.now());
        return token;
      },
    });
    broker.clients.push(rc);
    const states = new Recorder();
    rc.on("state", states.fn);
    await rc.online({ user: "short" });
    // Past the first token's exp (the broker would close the connection with 4001 then, had auth not renewed it).
    await until(() => minted.length >= 3 && Date.now() > firstExp + 300, "a third token, past the first's exp", 10000);
    assert.equal((await rc.query(["short"]))[0].status, "online");
    assert.equal(sockets, 1, "one connection throughout");
    assert.deepEqual(states.items, ["connecting", "connected"]);

    // A refresh that fails: the broker closes the connection at exp (4001), and the client reconnects at once
    // with a fresh token.
    let calls = 0;
    const flaky = new RollCall(broker.url, {
      getToken: async () => {
        calls += 1;
        if (calls === 2 || calls === 3) throw new Error("the backend is down"); // both refreshes before exp
        return broker.token("flaky", { expiresIn: calls === 1 ? 2 : 3600 });
      },
    });
    broker.clients.push(flaky);
    const flakyStates = new Recorder();
    flaky.on("state", flakyStates.fn);
    await flaky.online({ user: "flaky" });
    await flakyStates.find((s) => s === "reconnecting", "the 4001 close", 10000);
    await flakyStates.find((s) => s === "connected", "connected again with a fresh token", 10000, flakyStates.items.indexOf("reconnecting"));
    assert.ok(calls >= 4, `${calls} tokens asked`);
    await until(async () => (await flaky.query(["flaky"]))[0].status === "online", "flaky online again");

    const fixed = as("fixed", { token: broker.token("fixed", { expiresIn: 2 }) });
    await fixed.online({ user: "fixed" });
    await until(() => fixed.state === "closed", "closed after the token expired (4001)", 5000);
    assert.equal(fixed.error.code, "token_expired");
  });
});

describe("a broker that is killed and restarted", () => {
  let broker;
  let zmq;
  before(async () => {
    broker = await new Broker({ testMode: false, dataDir: true, args: ["--offline-grace-ms", "3000"] }).start();
  });
  after(async () => {
    zmq?.stop();
    await broker?.stop();
  });

  test("the client reconnects, says hello again with the status asked last, resubscribes; no record goes back", async () => {
    zmq = await new ZmqWatcher(broker.endpoints.update, ["presence/k-alice/"]).started();
    const bobClient = broker.client({ sub: "k-bob", role: "user" });
    const bob = await bobClient.online({ user: "k-bob", status: "busy" });
    const rc = broker.client({ sub: "k-alice", role: "user" });
    const states = new Recorder();
    rc.on("state", states.fn);
    const me = await rc.online({ user: "k-alice" });
    const firstSession = me.id;
    const followed = new Recorder();
    rc.follow(["k-bob"], followed.fn);
    const busy = await followed.find((r) => r.status === "busy", "bob busy");
    // A kill -9 loses what the broker has not written yet (at most one write interval): wait until bob's record is.
    await until(() => broker.writtenSeq("k-bob") >= busy.seq, "bob's record written to the data directory");
    await broker.kill9();
    await states.find((s) => s === "reconnecting", "reconnecting");
    me.setStatus("away", { text: "back soon" }); // asked while the broker is gone
    await broker.start(); // the same data dir and ports
    await states.find((s) => s === "connected", "connected again", 20000, states.items.indexOf("reconnecting"));
    await until(() => me.id && me.id !== firstSession, "a new session (unknown_session, then hello)");
    const away = await zmq.find((r) => r.status === "away", "alice away from the restarted broker", 10000);
    assert.equal(away.text, "back soon");
    await bob.setStatus("online");
    await followed.find((r) => r.status === "online", "bob's change after the restart: resubscribed", 10000);
    const seqs = followed.items.map((r) => r.seq);
    for (let i = 1; i < seqs.length; i++) assert.ok(seqs[i] > seqs[i - 1], `seqs go back: ${seqs}`);
    const zmqSeqs = zmq.records("k-alice").map((r) => r.seq);
    assert.ok(zmqSeqs.length >= 2);
  });
});

describe("a connection cut and restored (a TCP proxy)", () => {
  let broker;
  let proxy;
  before(async () => {
    broker = await new Broker({ args: ["--offline-grace-ms", "60000"] }).start();
    const { CuttableProxy } = await import("../helpers/proxy.js");
    proxy = await new CuttableProxy(broker.ports.ws).listen();
  });
  after(async () => {
    await proxy?.close();
    await broker?.stop();
  });

  test("the session is renewed within the grace period: same session, nothing published", async () => {
    const zmq = await new ZmqWatcher(broker.endpoints.update, ["presence/c-alice/"]).started();
    try {
      const rc = broker.client({ sub: "c-alice", role: "user", url: `ws://127.0.0.1:${proxy.port}/v1/ws` });
      const states = new Recorder();
      rc.on("state", states.fn);
      const me = await rc.online({ user: "c-alice" });
      const followed = new Recorder();
      rc.follow(["c-bob"], followed.fn);
      await followed.find((r) => r.seq === 0, "bob's unknown record");
      const online = await zmq.find((r) => r.status === "online", "alice online");
      const session = me.id;
      await proxy.cut();
      await states.find((s) => s === "reconnecting", "reconnecting");
      await proxy.restore();
      await states.find((s) => s === "connected", "connected again", 10000, states.items.indexOf("reconnecting"));
      await until(() => !me.machine.renew && me.machine.inFlight === null, "the renewal answered");
      assert.equal(me.id, session, "the same session");
      // Past the grace period on the broker's clock: a session that was not renewed would end now.
      await broker.advance(61000);
      const [now] = await broker.client().query(["c-alice"]);
      assert.equal(now.status, "online");
      assert.equal(now.seq, online.seq, "nothing published for alice: no flicker");
      await broker.client({ sub: "c-bob", role: "user" }).online({ user: "c-bob" });
      await followed.find((r) => r.status === "online", "bob, through the resubscription");
    } finally {
      zmq.stop();
    }
  });
});

describe("resuming after a cut, on a broker that keeps a presence log (docs/history.md)", () => {
  let broker;
  let proxy;
  before(async () => {
    broker = await new Broker({ dataDir: true }).start();
    const { CuttableProxy } = await import("../helpers/proxy.js");
    proxy = await new CuttableProxy(broker.ports.ws).listen();
  });
  after(async () => {
    await proxy?.close();
    await broker?.stop();
  });

  test("every transition missed while cut off comes in order after the reconnection, none twice", async () => {
    const rc = broker.client({ sub: "r-watcher", role: "user", url: `ws://127.0.0.1:${proxy.port}/v1/ws` });
    const states = new Recorder();
    rc.on("state", states.fn);
    const followed = new Recorder();
    rc.follow(["r-bob"], followed.fn);
    const bobClient = broker.client({ sub: "r-bob", role: "user" });
    const bob = await bobClient.online({ user: "r-bob" });
    await followed.find((r) => r.status === "online", "bob online");
    await proxy.cut();
    await states.find((s) => s === "reconnecting", "reconnecting");
    await bob.setStatus("away", { text: "lunch" });
    await bob.setStatus("busy", { text: "call" });
    const seen = followed.items.length;
    await proxy.restore();
    await states.find((s) => s === "connected", "connected again", 10000, states.items.indexOf("reconnecting"));
    await bob.setStatus("online");
    await followed.find((r) => r.status === "online", "bob's live change after the resume", 10000, seen);
    const after = followed.items.slice(seen).filter((r) => r.seq > 0);
    assert.deepEqual(
      after.map((r) => `${r.status} ${r.text ?? ""}`),
      ["away lunch", "busy call", "online "],
      "the missed transitions, in order, then the live one",
    );
    const offsets = after.map((r) => r.offset);
    assert.ok(offsets.every((o, i) => typeof o === "number" && (i === 0 || o > offsets[i - 1])), `offsets: ${offsets}`);
  });
});
