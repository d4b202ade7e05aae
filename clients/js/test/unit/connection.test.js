import { test } from "node:test";
import assert from "node:assert/strict";
import { Backoff, ConnectionMachine, refreshTime } from "../../src/index.js";

const fixed = () => new Backoff({ initialMs: 1000, maxMs: 8000, jitter: 0.2, random: () => 0.5 });

test("a dropped connection is tried again at once, then with capped, doubling backoff", () => {
  const m = new ConnectionMachine({ backoff: fixed() });
  assert.deepEqual(m.start(), ["connect"]);
  m.opened(0);
  assert.equal(m.state, "connected");
  assert.deepEqual(m.failed(5000, { opened: true, code: 1006 }), ["connect"], "up for 5 s: at once");
  assert.equal(m.state, "reconnecting");
  const delays = [];
  let now = 5000;
  for (let i = 0; i < 6; i++) {
    assert.deepEqual(m.failed(now, { opened: false, httpStatus: null }), []);
    delays.push(m.deadline() - now);
    assert.deepEqual(m.tick(m.deadline() - 1), [], "nothing before the deadline");
    now = m.deadline();
    assert.deepEqual(m.tick(now), ["connect"]);
  }
  assert.deepEqual(delays, [1000, 2000, 4000, 8000, 8000, 8000]);
  m.opened(now);
  assert.equal(m.state, "connected");
  assert.equal(m.attempt, 0);
});

test("a connection that drops right after opening backs off instead of looping", () => {
  const m = new ConnectionMachine({ backoff: fixed() });
  m.start();
  m.opened(0);
  assert.deepEqual(m.failed(10, { opened: true, code: 1013 }), [], "not at once: it was up for 10 ms");
  assert.equal(m.deadline(), 10 + 1000);
});

test("the jitter stays within ±20 %", () => {
  for (const r of [0, 0.25, 0.999]) {
    const delay = new Backoff({ initialMs: 1000, random: () => r }).next();
    assert.ok(delay >= 800 && delay <= 1200, `${delay}`);
  }
});

test("a 401 with a fixed token ends closed with unauthorized, not a loop", () => {
  const m = new ConnectionMachine({ backoff: fixed() });
  m.start();
  assert.deepEqual(m.failed(0, { opened: false, httpStatus: 401 }), []);
  assert.equal(m.state, "closed");
  assert.equal(m.error.code, "unauthorized");
  assert.equal(m.deadline(), null);
  assert.deepEqual(m.tick(1e9), []);
});

test("a 401 with getToken is tried once more with a fresh token, then ends closed", () => {
  const m = new ConnectionMachine({ backoff: fixed(), canRefreshToken: true });
  m.start();
  assert.deepEqual(m.failed(0, { opened: false, httpStatus: 401 }), []);
  assert.equal(m.state, "reconnecting");
  assert.deepEqual(m.tick(m.deadline()), ["connect"]);
  m.failed(2000, { opened: false, httpStatus: 401 });
  assert.equal(m.state, "closed");
  assert.equal(m.error.code, "unauthorized");
  assert.deepEqual(m.reconnectNow(3000), ["connect"], "the application may try again");
  assert.equal(m.state, "reconnecting");
});

test("refused upgrades a browser cannot read end closed after three", () => {
  const m = new ConnectionMachine({ backoff: fixed(), canRefreshToken: true });
  m.start();
  m.failed(0, { opened: false, httpStatus: "opaque" });
  m.tick(m.deadline());
  m.failed(1, { opened: false, httpStatus: null }); // unreachable in between: not a refusal
  m.tick(m.deadline());
  m.failed(2, { opened: false, httpStatus: "opaque" });
  m.tick(m.deadline());
  assert.equal(m.state, "reconnecting");
  m.failed(3, { opened: false, httpStatus: "opaque" });
  m.tick(m.deadline());
  assert.equal(m.state, "reconnecting");
  m.failed(4, { opened: false, httpStatus: "opaque" });
  assert.equal(m.state, "closed");
});

test("a probe answered 426 (the broker's answer to plain HTTP, whatever the token) counts as a refusal; 503 does not; 404 closes", () => {
  const m = new ConnectionMachine({ backoff: fixed() });
  m.start();
  for (let i = 0; i < 5; i++) {
    m.failed(i, { opened: false, httpStatus: 503 });
    m.tick(m.deadline());
  }
  assert.equal(m.state, "reconnecting", "a full broker is waited for");
  m.failed(10, { opened: false, httpStatus: 426 });
  m.tick(m.deadline());
  m.failed(11, { opened: false, httpStatus: 426 });
  m.tick(m.deadline());
  m.failed(12, { opened: false, httpStatus: 426 });
  assert.equal(m.state, "closed");
  assert.equal(m.error.code, "unauthorized");
  const wrong = new ConnectionMachine({ backoff: fixed() });
  wrong.start();
  wrong.failed(0, { opened: false, httpStatus: 404 });
  assert.equal(wrong.error.code, "bad_url");
});

test("4001 asks for a fresh token at once; with a fixed token it ends closed", () => {
  const provider = new ConnectionMachine({ backoff: fixed(), canRefreshToken: true });
  provider.start();
  provider.opened(0);
  assert.deepEqual(provider.failed(10, { opened: true, code: 4001 }), ["connect"]);
  const fixedToken = new ConnectionMachine({ backoff: fixed() });
  fixedToken.start();
  fixedToken.opened(0);
  assert.deepEqual(fixedToken.failed(10, { opened: true, code: 4001 }), []);
  assert.equal(fixedToken.state, "closed");
  assert.equal(fixedToken.error.code, "token_expired");
});

test("tokens are refreshed a quarter of their lifetime before exp, and 5 s after a failed refresh", () => {
  const m = new ConnectionMachine({ backoff: fixed(), canRefreshToken: true });
  m.start();
  m.opened(0, 40000);
  assert.equal(m.deadline(), 30000);
  assert.deepEqual(m.tick(29999), []);
  assert.deepEqual(m.tick(30000), ["refresh"]);
  m.refreshFailed(30000);
  assert.equal(m.deadline(), 35000);
  assert.deepEqual(m.tick(35000), ["refresh"]);
  m.refreshFailed(39600);
  assert.equal(m.deadline(), 44600, "past the last chance before exp: every 5 s, not in a loop");
  m.refreshFailed(30000);
  assert.equal(m.deadline(), 35000);
  m.refreshed(35000, 3635000);
  assert.equal(m.deadline(), 3635000 - 60000, "at most 60 s before");
  assert.equal(refreshTime(0, 2000), 1000, "at least 1 s before");
});

test("reconnectNow skips the backoff, and checks a connection that looks up", () => {
  const m = new ConnectionMachine({ backoff: fixed() });
  m.start();
  m.failed(0, { opened: false, httpStatus: null });
  assert.deepEqual(m.reconnectNow(10), ["connect"]);
  assert.deepEqual(m.reconnectNow(11), [], "an attempt is under way");
  m.opened(20);
  assert.deepEqual(m.reconnectNow(30), ["check"]);
  m.close();
  assert.deepEqual(m.reconnectNow(40), [], "closed by the application stays closed");
  assert.deepEqual(m.failed(50, { opened: true }), []);
});
