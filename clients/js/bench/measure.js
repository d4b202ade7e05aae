// Change → update, measured the same way in Node (bench/latency.js) and in Chromium (bench/latency.html): one status
// change at a time, from the moment it is sent to the moment the other side has it. Two rows, in one run:
//   raw      a `status` request sent on one raw WebSocket → its update parsed on another (no client)
//   client   `session.setStatus` on one RollCall → `rc.store.subscribe` called on another, the store updated
const statuses = ["away", "online"];

async function openSocket(url) {
  const ws = new WebSocket(url);
  await new Promise((resolve, reject) => {
    ws.onopen = resolve;
    ws.onerror = () => reject(new Error(`could not open ${url}`));
  });
  return ws;
}

const withToken = (url, token) => (token ? `${url}?token=${encodeURIComponent(token)}` : url);

export async function measureRaw({ url, senderToken, receiverToken, user, changes }) {
  const sender = await openSocket(withToken(url, senderToken));
  const receiver = await openSocket(withToken(url, receiverToken));
  let waiting = null;
  let session = null;
  receiver.onmessage = (event) => {
    const frame = JSON.parse(event.data);
    if (frame.topic === `presence/${user}/` && waiting && frame.message.status === waiting.status) waiting.resolve(performance.now());
  };
  const granted = new Promise((resolve) => {
    sender.onmessage = (event) => {
      const frame = JSON.parse(event.data);
      if (frame.id === 1) resolve((session = frame.session));
    };
  });
  sender.send(JSON.stringify({ op: "hello", id: 1, user, keepalive: "connection" }));
  receiver.send(JSON.stringify({ op: "subscribe", id: 1, topics: [`presence/${user}/`] }));
  await granted;
  const samples = [];
  for (let i = 0; i < changes; i++) {
    const status = statuses[i % 2];
    const arrived = new Promise((resolve) => (waiting = { status, resolve }));
    const start = performance.now();
    sender.send(JSON.stringify({ op: "status", id: i + 2, session, status }));
    samples.push((await arrived) - start);
  }
  sender.close();
  receiver.close();
  return samples;
}

export async function measureClient({ RollCall, url, senderToken, receiverToken, user, changes }) {
  const sender = new RollCall(url, { token: senderToken });
  const receiver = new RollCall(url, { token: receiverToken });
  try {
    const me = await sender.online({ user });
    let waiting = null;
    let ready;
    const online = new Promise((resolve) => (ready = resolve));
    receiver.follow([user], (record) => record.status === "online" && ready());
    receiver.store.subscribe(({ users }) => {
      if (users.includes(user) && waiting && receiver.store.get(user).status === waiting.status) waiting.resolve(performance.now());
    });
    await online;
    const samples = [];
    for (let i = 0; i < changes; i++) {
      const status = statuses[i % 2];
      const arrived = new Promise((resolve) => (waiting = { status, resolve }));
      const start = performance.now();
      me.setStatus(status);
      samples.push((await arrived) - start);
    }
    return samples;
  } finally {
    await Promise.all([sender.close(), receiver.close()]);
  }
}

/** p50 and p99 in µs of the samples (ms) after the warm-up ones. */
export function summary(samples, warmup) {
  const sorted = samples.slice(warmup).sort((a, b) => a - b);
  const at = (p) => Math.round(sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] * 1000);
  return { p50: at(50), p99: at(99), n: sorted.length };
}

export function line(name, { p50, p99, n }) {
  return `${name.padEnd(38)} p50 ${`${p50} µs`.padStart(8)}   p99 ${`${p99} µs`.padStart(8)}   (${n} changes)`;
}
