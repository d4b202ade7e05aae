// A small typed use of the package: `tsc --noEmit` checks it against src/index.d.ts (clients/js/scripts/test).
import { RollCall, RollCallError, type PresenceRecord, type GroupView, type ConnectionState } from "../../src/index.js";

async function main(): Promise<void> {
  const rc = new RollCall("wss://presence.example.com/v1/ws", {
    getToken: async () => (await fetch("/presence-token")).text(),
    lifecycle: { hidden: "away", afterMs: 5000 },
  });
  const states: ConnectionState[] = [];
  rc.on("state", (state, error) => {
    states.push(state);
    if (error) console.log(error.code, error.message);
  });
  rc.on("broker", (beat) => ("lost" in beat ? console.log("stale") : console.log(beat.epoch)));

  const me = await rc.online({ user: "alice", status: "online", text: "hi", keepalive: "connection" });
  const { held } = await me.setStatus("offline", { afterMs: 5000 });
  const flag: boolean = held;
  void me.setStatus("away", { text: "lunch" });
  await me.bye();

  const stop = rc.follow(["bob", "carol"], (record: PresenceRecord) => console.log(record.status, record.seq));
  stop("bob");
  stop();
  const stopGroup = rc.followGroup("team-7", (group) => {
    if ("members" in group) console.log(Object.keys(group.members).length);
    else if ("deleted" in group) console.log("deleted", group.seq);
    else console.log(group.changed.length);
  });
  const records: PresenceRecord[] = await rc.query(["bob"]);
  const view: GroupView | undefined = rc.store.group("team-7");
  const unsubscribe = rc.store.subscribe(() => console.log(rc.store.get("bob")?.status, view?.online, records.length, flag));
  unsubscribe();
  const stopStore = rc.store.subscribe(({ users, groups }) => console.log(users.includes("bob"), groups.length));
  stopStore();
  stopGroup();
  try {
    await rc.group("team-7", { add: ["dave"] });
  } catch (error) {
    if (error instanceof RollCallError && error.code === "forbidden") console.log(error.message);
  }
  rc.reconnectNow();
  await rc.close();

  // The platform's own WebSocket is a WebSocket constructor for the client (it did not compile before).
  const withDom = new RollCall("ws://127.0.0.1:7733/v1/ws", { token: "t", WebSocket: WebSocket });
  const whole = await withDom.group("team-7");
  const pages: number = Object.keys(whole.members).length;
  void pages;
  // @ts-expect-error a status the broker does not know
  void me.setStatus("dnd");
  // @ts-expect-error follow takes user ids and a callback of records
  withDom.follow(["bob"], (record: { group: string }) => record);
}

void main;
