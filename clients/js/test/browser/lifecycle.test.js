// The package in headless Chromium: a tab hidden and shown again publishes nothing (no flicker); hidden for longer
// than afterMs it goes away on the broker's clock; leaving the page says bye.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { Broker } from "../helpers/broker.js";
import { Chromium, chromiumPath } from "../helpers/chromium.js";
import { serveRepository } from "../helpers/static.js";
import { Recorder } from "../helpers/wait.js";

let broker;
let browser;
let server;

before(async () => {
  if (!chromiumPath) return;
  broker = await new Broker().start();
  server = await serveRepository();
  browser = await new Chromium().launch();
});
after(async () => {
  // Each closes even if one before it fails: a broker or server left open would keep this file from ending.
  const closes = [() => browser?.close(), () => server?.close(), () => broker?.stop()];
  for (const close of closes) {
    try {
      await close();
    } catch (error) {
      console.error(error);
    }
  }
});

test("a hidden tab holds its status at the broker: shown again in time, nothing is published", { skip: !chromiumPath && "needs chromium" }, async () => {
  const watcher = broker.client();
  const seen = new Recorder();
  watcher.follow(["tab-alice"], seen.fn);
  const page = await browser.open(
    `${server.base}/clients/js/test/browser/lifecycle.html?ws=${encodeURIComponent(broker.url)}` +
      `&token=${broker.token("tab-alice")}&me=tab-alice`);
  await page.waitFor("window.settled()", "the session online");
  const online = await seen.find((r) => r.status === "online", "alice online");

  await page.eval("hide()");
  await page.waitFor("window.me.held && window.settled()", "the away status held by the broker");
  await page.eval("show()");
  await page.waitFor("!window.me.held && window.settled()", "back to online, the held change cancelled");
  await broker.advance(10000); // well past afterMs on the broker's clock
  const [now] = await watcher.query(["tab-alice"]);
  assert.equal(now.status, "online");
  assert.equal(now.seq, online.seq, "no record was published: no flicker");
  assert.deepEqual(seen.items.filter((r) => r.seq > online.seq), []);

  // Hidden for longer than afterMs: away, and online again once shown.
  await page.eval("hide()");
  await page.waitFor("window.me.held && window.settled()", "held again");
  await broker.advance(6000);
  await seen.find((r) => r.status === "away", "alice away once the held status came due");
  await page.eval("show()");
  await seen.find((r) => r.status === "online" && r.seq > online.seq, "alice online again");

  // Leaving the page (pagehide) says bye: offline with reason bye, not closed.
  await page.navigate("about:blank");
  const gone = await seen.find((r) => r.status === "offline" && r.seq > online.seq, "alice offline after pagehide");
  assert.equal(gone.reason, "bye");
  assert.deepEqual(page.errors, []);
});
