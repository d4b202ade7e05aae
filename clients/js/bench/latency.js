// Change → store update: how long a status change takes from `setStatus` on one client to the store update (the
// `rc.store.subscribe` callback) on another, over a real broker on loopback, beside the same change over raw
// WebSockets (a `status` request sent on one socket, its update parsed on another), in one run.
// Usage: ROLLCALL_BIN=... node --experimental-websocket bench/latency.js [changes]   (default 2000, after 200 warm-up)
import { Broker } from "../test/helpers/broker.js";

const changes = Number(process.argv[2] ?? 2000);
const warmup = 200;
const statuses = ["away", "online"];

function percentile(sorted, p) {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

function report(name, samples) {
  const sorted = samples.slice(warmup).sort((a, b) => a - b);
  const us = (ms) => `${Math.round(ms * 1000)} µs`;
  console.log(`${name.padEnd(34)} p50 ${us(percentile(sorted, 50)).padStart(8)}   p99 ${us(percentile(sorted, 99)).padStart(8)}   (${sorted.length} changes)`);
}

async function rawSocket(url) {
  const ws = new WebSocket(url);
  await new Promise((resolve, reject) => {
    ws.onopen = resolve;
    ws.onerror = reject;
  });
  return ws;
}

async function raw(broker) {
  const sender = await rawSocket(`${broker.url}?token=${broker.token("raw-user")}`);
  const receiver = await rawSocket(`${broker.url}?token=${broker.token("raw-viewer")}`);
  let waiting = null;
  receiver.onmessage = (event) => {
    const frame = JSON.parse(event.data);
    if (frame.topic === "presence/raw-user/" && waiting && frame.message.status === waiting.status) waiting.resolve(performance.now());
  };
  sender.onmessage = (event) => {
    const frame = JSON.parse(event.data);
    if (frame.id === 1) sender.session = frame.session;
  };
  sender.send(JSON.stringify({ op: "hello", id: 1, user: "raw-user", keepalive: "connection" }));
  receiver.send(JSON.stringify({ op: "subscribe", id: 1, topics: ["presence/raw-user/"] }));
  while (!sender.session) await new Promise((r) => setTimeout(r, 5));
  const samples = [];
  for (let i = 0; i < changes + warmup; i++) {
    const status = statuses[i % 2];
    const arrived = new Promise((resolve) => (waiting = { status, resolve }));
    const start = performance.now();
    sender.send(JSON.stringify({ op: "status", id: i + 2, session: sender.session, status }));
    samples.push((await arrived) - start);
  }
  sender.close();
  receiver.close();
  return samples;
}

async function client(broker) {
  const sender = broker.client({ sub: "js-user", role: "user" });
  const receiver = broker.client({ sub: "js-viewer", role: "user" });
  const me = await sender.online({ user: "js-user" });
  let waiting = null;
  receiver.follow(["js-user"], () => {});
  receiver.store.subscribe(({ user }) => {
    if (user === "js-user" && waiting && receiver.store.get("js-user").status === waiting.status) waiting.resolve(performance.now());
  });
  while (receiver.store.get("js-user")?.status !== "online") await new Promise((r) => setTimeout(r, 5));
  const samples = [];
  for (let i = 0; i < changes + warmup; i++) {
    const status = statuses[i % 2];
    const arrived = new Promise((resolve) => (waiting = { status, resolve }));
    const start = performance.now();
    me.setStatus(status);
    samples.push((await arrived) - start);
  }
  return samples;
}

const broker = await new Broker({ testMode: false }).start();
try {
  console.log(`rollcall serve (${process.env.ROLLCALL_BIN ?? "default binary"}), loopback, node ${process.version}, one change at a time`);
  report("raw WebSocket (send → update)", await raw(broker));
  report("rollcall-client (setStatus → store)", await client(broker));
} finally {
  await broker.stop();
}
