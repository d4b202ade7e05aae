// What a web team adopting the client runs into (the review of issue 25): each test failed before its fix. The
// shell over the fake WebSocket and the fake clock, or a machine alone.
import { test } from "node:test";
import assert from "node:assert/strict";
import { SessionMachine, WatchMachine, Store } from "../../src/index.js";
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

