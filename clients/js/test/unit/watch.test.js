import { test } from "node:test";
import assert from "node:assert/strict";
import { Store, WatchMachine } from "../../src/index.js";

const rec = (user, status, seq) => ({ user, status, since: 1, last_seen: 1, sessions: 1, seq });

test("the seq rule: a record whose seq is not greater than the last is dropped", () => {
  const w = new WatchMachine();
  assert.deepEqual(w.follow(["presence/bob/", "presence/bob/"]), ["presence/bob/"]);
  assert.equal(w.record(rec("bob", "online", 10)), true);
  assert.equal(w.record(rec("bob", "offline", 10)), false, "same seq: a repeat");
  assert.equal(w.record(rec("bob", "offline", 9)), false, "older");
  assert.equal(w.store.get("bob").status, "online");
  assert.equal(w.record(rec("bob", "away", 11)), true);
  assert.equal(w.record(rec("carol", "away", 11)), false, "not followed");
});

test("a new epoch forgets every seq; the same epoch does not", () => {
  const w = new WatchMachine();
  w.follow(["presence/bob/"]);
  assert.equal(w.connectedTo("e1"), false, "the first epoch is not a change");
  w.record(rec("bob", "online", 10));
  assert.equal(w.connectedTo("e1"), false);
  assert.equal(w.record(rec("bob", "offline", 0)), false);
  assert.equal(w.connectedTo("e2"), true);
  assert.equal(w.record(rec("bob", "offline", 0)), true, "an ephemeral broker's unknown record");
});

test("unfollow forgets what nobody follows any more, and says which topics to unsubscribe", () => {
  const w = new WatchMachine();
  w.follow(["presence/bob/", "presence/bob/"]);
  w.record(rec("bob", "online", 10));
  assert.deepEqual(w.unfollow(["presence/bob/"]), []);
  assert.ok(w.store.get("bob"));
  assert.deepEqual(w.unfollow(["presence/bob/"]), ["presence/bob/"]);
  assert.equal(w.store.get("bob"), undefined);
});

test("the group seq rule: reads replace, messages apply in full, older ones are dropped", () => {
  const w = new WatchMachine();
  w.follow(["group/team/"]);
  const counts = { online: 1, busy: 0, away: 0, offline: 1 };
  const read = w.groupRead({ group: "team", online: 1, total: 2, counts, members: { a: rec("a", "online", 5), b: rec("b", "offline", 6) }, seq: 100 });
  assert.equal(read.view.total, 2);
  assert.equal(read.records.length, 2);
  assert.equal(w.store.get("a").status, "online", "members are in the store");
  assert.equal(w.groupMessage({ group: "team", online: 0, total: 2, counts, changed: [], removed: [], seq: 100 }), null, "same seq");
  const applied = w.groupMessage({ group: "team", online: 0, total: 1, counts, changed: [rec("a", "offline", 7)], removed: ["b", "zed"], seq: 101 });
  assert.deepEqual(applied.records.map((r) => r.status), ["offline"]);
  const view = w.store.group("team");
  assert.deepEqual(Object.keys(view.members), ["a"]);
  assert.equal(view.members.a.status, "offline");
  assert.equal(w.store.get("b"), undefined, "a removed member is forgotten");
  assert.equal(w.groupRead({ group: "team", online: 9, total: 9, counts, members: {}, seq: 99 }), null, "an older read");
  w.groupMessage({ group: "team", deleted: true, seq: 102 });
  assert.equal(w.store.group("team").total, 0);
});

test("a read keeps a member's newer record that came while the read was under way", () => {
  const w = new WatchMachine();
  w.follow(["group/team/", "presence/a/"]);
  w.record(rec("a", "busy", 50));
  const counts = { online: 1, busy: 0, away: 0, offline: 0 };
  w.groupRead({ group: "team", online: 1, total: 1, counts, members: { a: rec("a", "online", 40) }, seq: 10 });
  assert.equal(w.store.group("team").members.a.status, "busy");
  assert.equal(w.store.get("a").status, "busy");
});

test("broker heartbeats: lost after three intervals, read again when back or when dropped grows", () => {
  const w = new WatchMachine();
  assert.equal(w.heartbeat({ epoch: "e", heartbeat_ms: 1000, dropped: 0 }, 0), false);
  assert.equal(w.deadline(), 3000);
  assert.equal(w.tick(2999), false);
  assert.equal(w.tick(3000), true);
  assert.equal(w.tick(3001), false, "said once");
  assert.equal(w.heartbeat({ epoch: "e", heartbeat_ms: 1000, dropped: 0 }, 4000), true, "back: read again");
  assert.equal(w.heartbeat({ epoch: "e", heartbeat_ms: 1000, dropped: 0 }, 5000), false);
  assert.equal(w.heartbeat({ epoch: "e", heartbeat_ms: 1000, dropped: 3 }, 6000), true, "dropped grew");
});

test("the store notifies subscribers and replaces records rather than changing them", () => {
  const store = new Store();
  const seen = [];
  const stop = store.subscribe((what) => seen.push(what));
  const first = rec("a", "online", 1);
  store.setRecord(first);
  store.setRecord(rec("a", "away", 2));
  assert.equal(first.status, "online");
  stop();
  store.setRecord(rec("a", "busy", 3));
  assert.deepEqual(seen, [{ users: ["a"], groups: [] }, { users: ["a"], groups: [] }]);
  assert.equal(store.version, 3);
});

test("resuming: the highest offset received is where a connection to the same log resumes; another log starts over", () => {
  const w = new WatchMachine();
  assert.equal(w.resumePoint("log-a"), null, "nothing received yet");
  w.noteOffset({ ...rec("bob", "online", 1), offset: 120 });
  w.noteOffset({ ...rec("carol", "online", 1), offset: 90 });
  w.noteOffset(rec("dave", "online", 1)); // no offset: a broker without a log
  assert.deepEqual(w.resumePoint("log-a"), { after: 120, log_epoch: "log-a" });
  assert.equal(w.resumePoint("log-b"), null, "another log: its offsets mean nothing here");
  assert.equal(w.lastOffset, null);
  w.noteOffset({ ...rec("bob", "away", 2), offset: 7 });
  assert.deepEqual(w.resumePoint("log-b"), { after: 7, log_epoch: "log-b" });
  assert.equal(w.resumePoint(undefined), null, "a broker without a log");
});

test("resuming: a connection that subscribed afresh resumes from ping's offset, though no record carried one", () => {
  const w = new WatchMachine();
  assert.equal(w.resumePoint("log-a", 500), null, "the first connection subscribes afresh");
  // bob was unknown at the subscription (a record without an offset); his first transition was still held for the
  // log when the connection ended, so nothing with an offset came.
  w.noteOffset(rec("bob", "offline", 0));
  assert.deepEqual(w.resumePoint("log-a", 900), { after: 500, log_epoch: "log-a" }, "everything after 500 is owed");
  w.noteOffset({ ...rec("bob", "online", 1), offset: 600 });
  assert.deepEqual(w.resumePoint("log-a", 900), { after: 600, log_epoch: "log-a" }, "the offsets received count");
  assert.equal(w.resumePoint("log-b", 40), null, "another log subscribes afresh");
  assert.deepEqual(w.resumePoint("log-b", 90), { after: 40, log_epoch: "log-b" });
  assert.equal(w.resumePoint(undefined, 40), null, "a broker without a log");
  assert.equal(w.lastOffset, null);
});
