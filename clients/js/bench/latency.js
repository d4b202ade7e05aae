// Change → store update in Node, beside raw WebSockets, against a real broker on loopback (bench/measure.js).
// Usage: ROLLCALL_BIN=... node --experimental-websocket bench/latency.js [changes]   (default 2000, after 200 warm-up)
import { RollCall } from "../src/index.js";
import { Broker } from "../test/helpers/broker.js";
import { line, measureClient, measureRaw, summary } from "./measure.js";

const changes = Number(process.argv[2] ?? 2000);
const warmup = 200;
const broker = await new Broker({ testMode: false }).start();
try {
  console.log(`node ${process.version}, rollcall serve ${process.env.ROLLCALL_BIN ?? ""} on loopback, one change at a time`);
  const tokens = (a, b) => ({ senderToken: broker.token(a), receiverToken: broker.token(b) });
  const raw = await measureRaw({ url: broker.url, ...tokens("raw-user", "raw-viewer"), user: "raw-user", changes: changes + warmup });
  console.log(line("raw WebSocket (send → update)", summary(raw, warmup)));
  const client = await measureClient({ RollCall, url: broker.url, ...tokens("js-user", "js-viewer"), user: "js-user", changes: changes + warmup });
  console.log(line("rollcall-client (setStatus → store)", summary(client, warmup)));
} finally {
  await broker.stop();
}
