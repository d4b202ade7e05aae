// Change → store update in headless Chromium, beside raw WebSockets in the same page (bench/latency.html), against
// a real broker on loopback. Usage: ROLLCALL_BIN=... node --experimental-websocket bench/browser.js [changes]
import { Broker } from "../test/helpers/broker.js";
import { Chromium } from "../test/helpers/chromium.js";
import { serveRepository } from "../test/helpers/static.js";
import { line } from "./measure.js";

const changes = Number(process.argv[2] ?? 2000);
const warmup = 200;
const broker = await new Broker({ testMode: false }).start();
const server = await serveRepository();
const browser = await new Chromium().launch();
try {
  const t = (sub) => broker.token(sub);
  const page = await browser.open(`${server.base}/clients/js/bench/latency.html?ws=${encodeURIComponent(broker.url)}` +
    `&raw=${t("raw-user")},${t("raw-viewer")}&client=${t("js-user")},${t("js-viewer")}&changes=${changes}&warmup=${warmup}`);
  const result = await page.waitFor("window.result", "the page's measurement", 300000);
  if (result.error) throw new Error(result.error);
  console.log(`${result.userAgent.match(/(Headless)?Chrome\/[\d.]+/)?.[0]}, rollcall serve ${process.env.ROLLCALL_BIN ?? ""} on loopback, one change at a time`);
  console.log(line("raw WebSocket (send → update)", result.raw));
  console.log(line("rollcall-client (setStatus → store)", result.client));
} finally {
  await browser.close();
  await server.close();
  await broker.stop();
}
