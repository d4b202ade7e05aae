import { Store } from "./store.js";

/**
 * What is followed, and the seq rules, with no socket and no timer: topics with their counts of followers, each
 * user's and group's last applied `seq` (protocol.md §9.4, §8.8), the broker's epoch, and the broker's heartbeat
 * (§8.9). It keeps `store` up to date and says when the client should read everything again (`resync`).
 *
 * Rules: drop a record whose `seq` is not greater than the last applied for its user, from every source (updates,
 * query answers, group replies and messages); drop a group message whose `seq` is not greater than the last for its
 * group, and a group read with a lower one; on a new epoch forget every seq; read again when the heartbeat's
 * `dropped` grows or heartbeats come back after three missed intervals (then `lost`).
 */
export class WatchMachine {
  constructor(store = new Store()) {
    this.store = store;
    /** topic → number of follows that want it */
    this.topics = new Map();
    this.seqs = new Map();
    this.groupSeqs = new Map();
    this.epoch = null;
    this.lastBeatAt = null;
    this.beatMs = 1000;
    this.dropped = null;
    this.lost = false;
    /** Reads again because `dropped` grew: at most one per `resyncPause` (1 s, doubling to 30 s while it keeps
     * growing, protocol §8.4); one held back is due at `resyncAt`. */
    this.resyncPause = 1000;
    this.lastResyncAt = null;
    this.resyncAt = null;
    /** The broker's presence log (docs/history.md): its epoch, and the highest offset of a record received on a
     * subscription, from which a new connection resumes. */
    this.logEpoch = null;
    this.lastOffset = null;
  }

  /** A record arrived on a subscription: its offset is where a resume starts (records arrive in offset order). */
  noteOffset(record) {
    if (typeof record?.offset === "number" && (this.lastOffset === null || record.offset > this.lastOffset)) {
      this.lastOffset = record.offset;
    }
  }

  /** The log a new connection's broker keeps (`ping`'s `log_epoch` and `offset`, asked before anything is
   * subscribed): `{after, log_epoch}` to resume the followed users' transitions from, or null (no log, another log,
   * or nothing received yet). Without a resume, the topics are subscribed afresh and the resume point starts at
   * `ping`'s offset: every transition after it comes on the new subscriptions (or is in their current records), so a
   * later connection resumes from there even if none of them carried an offset (a user still unknown at the
   * subscription, whose first transition was still held for the log when the connection ended). */
  resumePoint(logEpoch, offset) {
    const same = typeof logEpoch === "string" && logEpoch === this.logEpoch;
    if (same && this.lastOffset !== null) return { after: this.lastOffset, log_epoch: logEpoch };
    this.logEpoch = typeof logEpoch === "string" ? logEpoch : null;
    this.lastOffset = this.logEpoch !== null && typeof offset === "number" ? offset : null;
    return null;
  }

  /** Someone follows these topics: returns those that were not followed yet (to subscribe). */
  follow(topics) {
    const fresh = [];
    for (const topic of topics) {
      const count = this.topics.get(topic) ?? 0;
      if (count === 0) fresh.push(topic);
      this.topics.set(topic, count + 1);
    }
    return fresh;
  }

  /** Someone stops following these topics: returns those nobody follows any more (to unsubscribe), and forgets
   * what the store holds for them (a user still in a followed group keeps its record). */
  unfollow(topics) {
    const gone = [];
    for (const topic of topics) {
      const count = this.topics.get(topic) ?? 0;
      if (count <= 1) {
        if (count === 1) gone.push(topic);
        this.topics.delete(topic);
      } else {
        this.topics.set(topic, count - 1);
      }
    }
    for (const topic of gone) {
      const user = userOf(topic);
      if (user !== null) this.#forgetUnlessFollowed(user);
      const group = groupOf(topic);
      if (group !== null) this.#dropGroup(group);
    }
    return gone;
  }

  /** The followed users, and groups. */
  users() {
    return [...this.topics.keys()].map(userOf).filter((u) => u !== null);
  }

  groups() {
    return [...this.topics.keys()].map(groupOf).filter((g) => g !== null);
  }

  /** The epoch of the broker just connected to (from `ping`). True when it is a new run: every seq is forgotten. */
  connectedTo(epoch) {
    if (epoch === this.epoch) return false;
    const known = this.epoch !== null;
    this.epoch = epoch;
    this.seqs.clear();
    this.groupSeqs.clear();
    this.dropped = null;
    this.resyncPause = 1000;
    this.lastResyncAt = null;
    this.resyncAt = null;
    return known;
  }

  /** A record from anywhere: applied (and returned true) only if its seq is greater than the last. */
  record(record) {
    if (!this.topics.has(`presence/${record.user}/`) && !this.#inFollowedGroup(record.user)) return false;
    const last = this.seqs.get(record.user);
    if (last !== undefined && record.seq <= last) return false;
    this.seqs.set(record.user, record.seq);
    this.store.setRecord(record);
    return true;
  }

  /** A message on `group/<id>/`: if applied (by the group seq rule), returns `{records}`, the member records that
   * were news by the seq rule for records; else null. */
  groupMessage(message) {
    const id = message.group;
    if (!this.topics.has(`group/${id}/`)) return null;
    const last = this.groupSeqs.get(id);
    if (last !== undefined && message.seq <= last) return null;
    this.groupSeqs.set(id, message.seq);
    const view = this.store.group(id);
    if (message.deleted) {
      this.store.setGroup({ group: id, online: 0, total: 0, counts: zeroCounts(), members: {}, seq: message.seq, deleted: true });
      for (const user of Object.keys(view?.members ?? {})) this.#forgetUnlessFollowed(user);
      return { records: [] };
    }
    const members = { ...(view?.members ?? {}) };
    const removed = (message.removed ?? []).filter((user) => user in members);
    for (const user of removed) delete members[user];
    this.store.setGroup({
      group: id, online: message.online, total: message.total, counts: message.counts, members, seq: message.seq,
    });
    for (const user of removed) this.#forgetUnlessFollowed(user);
    return { records: (message.changed ?? []).filter((record) => this.#member(id, record)) };
  }

  /** A whole group read (every page of a `group` reply, members merged): replaces the view unless older; returns
   * `{view, records}` (the member records that were news), or null. */
  groupRead(read) {
    const id = read.group;
    if (!this.topics.has(`group/${id}/`)) return null;
    const last = this.groupSeqs.get(id);
    if (last !== undefined && read.seq < last) return null;
    this.groupSeqs.set(id, read.seq);
    const members = {};
    for (const [user, record] of Object.entries(read.members)) {
      // An update newer than the read may have come while it was under way.
      const newer = (this.seqs.get(user) ?? -1) > record.seq ? this.store.get(user) : undefined;
      members[user] = newer ?? record;
    }
    this.store.setGroup({ group: id, online: read.online, total: read.total, counts: read.counts, members, seq: read.seq });
    const records = Object.values(read.members).filter((record) => this.#member(id, record));
    return { view: this.store.group(id), records };
  }

  /** A heartbeat on `broker/`: returns whether to read everything again now (heartbeats are back, or `dropped`
   * grew and the last such read is a pause old; otherwise that read is due later: `resyncDue`). */
  heartbeat(beat, now) {
    this.lastBeatAt = now;
    if (typeof beat.heartbeat_ms === "number") this.beatMs = beat.heartbeat_ms;
    const dropped = beat.dropped ?? 0;
    const grew = this.dropped !== null && dropped > this.dropped;
    this.dropped = dropped;
    const back = this.lost;
    this.lost = false;
    if (!grew) {
      // A whole pause without growth: the next growth is read again at once, and the pause starts over.
      if (this.lastResyncAt !== null && this.resyncAt === null && now >= this.lastResyncAt + this.resyncPause) this.resyncPause = 1000;
      return back;
    }
    if (this.resyncAt !== null) return back;
    if (this.lastResyncAt === null || now >= this.lastResyncAt + this.resyncPause) {
      this.#resynced(now);
      return true;
    }
    this.resyncAt = this.lastResyncAt + this.resyncPause;
    return back;
  }

  /** Whether a read held back by the pause is due now (once). */
  resyncDue(now) {
    if (this.resyncAt === null || now < this.resyncAt) return false;
    this.#resynced(now);
    return true;
  }

  #resynced(now) {
    this.resyncAt = null;
    this.lastResyncAt = now;
    this.resyncPause = Math.min(30000, this.resyncPause * 2);
  }

  /** True when heartbeats just stopped (three intervals without one): the view may be stale. */
  tick(now) {
    if (this.lost || this.lastBeatAt === null || now < this.lastBeatAt + 3 * this.beatMs) return false;
    this.lost = true;
    return true;
  }

  /** The connection dropped: heartbeats are expected again from the next one. */
  disconnected() {
    this.lastBeatAt = null;
    this.lost = false; // the new connection reads everything again anyway
    this.resyncAt = null;
  }

  deadline() {
    const lost = this.lost || this.lastBeatAt === null ? null : this.lastBeatAt + 3 * this.beatMs;
    if (this.resyncAt === null) return lost;
    return lost === null ? this.resyncAt : Math.min(lost, this.resyncAt);
  }

  /** A member's record: into the group's view if newer than the one it holds; true if news by the seq rule. */
  #member(id, record) {
    const view = this.store.group(id);
    const held = view.members[record.user];
    if (!held || held.seq < record.seq) {
      this.store.setGroup({ ...view, members: { ...view.members, [record.user]: record } });
    }
    return this.record(record);
  }

  #forgetUnlessFollowed(user) {
    if (this.topics.has(`presence/${user}/`) || this.#inFollowedGroup(user)) return;
    this.store.deleteRecord(user);
    this.seqs.delete(user);
  }

  #dropGroup(id) {
    const view = this.store.group(id);
    this.store.deleteGroup(id);
    this.groupSeqs.delete(id);
    for (const user of Object.keys(view?.members ?? {})) this.#forgetUnlessFollowed(user);
  }

  #inFollowedGroup(user) {
    for (const id of this.groups()) if (this.store.group(id)?.members[user]) return true;
    return false;
  }
}

export function userOf(topic) {
  return topic.startsWith("presence/") && topic.length > 10 ? topic.slice(9, -1) : null;
}

export function groupOf(topic) {
  return topic.startsWith("group/") && topic.length > 7 ? topic.slice(6, -1) : null;
}

function zeroCounts() {
  return { online: 0, busy: 0, away: 0, offline: 0 };
}
