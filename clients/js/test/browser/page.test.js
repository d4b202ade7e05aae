// docs/examples/web/index.html in headless Chromium, on the package: dots, "last seen", "3 of 5 online", then the
// network cut (a TCP proxy in front of the broker, reset) and restored: "reconnecting", then the current data.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { Broker } from "../helpers/broker.js";
import { Chromium, chromiumPath } from "../helpers/chromium.js";
import { CuttableProxy } from "../helpers/proxy.js";
import { serveRepository } from "../helpers/static.js";

// The page's text as drive.py reads it (docs/examples/web/drive.py, PAGE_TEXT).
const PAGE_TEXT = `[document.getElementById('title').textContent, document.getElementById('summary').textContent,
  ...[...document.querySelectorAll('#contacts li')].map(li => li.className + ' ' + li.innerText.replace(/\\n/g, ' · ')),
  document.getElementById('connection').textContent].join('\\n')`;

let broker;
let browser;
let server;
let proxy;

before(async () => {
  if (!chromiumPath) return;
  broker = await new Broker().start();
  proxy = await new CuttableProxy(broker.ports.ws).listen();
  server = await serveRepository();
  browser = await new Chromium().launch();
});
after(async () => {
  // Each closes even if one before it fails: a broker or server left open would keep this file from ending.
  const closes = [() => browser?.close(), () => server?.close(), () => proxy?.close(), () => broker?.stop()];
  for (const close of closes) {
    try {
      await close();
    } catch (error) {
      console.error(error);
    }
  }
});

test("the example page shows the group live, and comes back with current data after a network cut", { skip: !chromiumPath && "needs chromium" }, async () => {
  const operator = broker.client();
  await operator.group("team", { members: ["alice", "bob", "carol", "dave", "erin"] });
  const alice = await operator.online({ user: "alice" });
  const bob = await operator.online({ user: "bob", status: "busy", text: "In a meeting" });
  const carol = await operator.online({ user: "carol", status: "away" });
  await (await operator.online({ user: "dave" })).bye();

  const url = `ws://127.0.0.1:${proxy.port}/v1/ws`;
  const page = await browser.open(
    `${server.base}/docs/examples/web/index.html?ws=${encodeURIComponent(url)}&token=${broker.token("erin")}&group=team`); // erin: a member
  const text = () => page.eval(PAGE_TEXT);
  const shows = (...parts) =>
    page.waitFor(`${JSON.stringify(parts)}.every((part) => (${PAGE_TEXT}).includes(part))`, `the page to show ${parts.join(" | ")}`);

  await shows("offline erin · never seen", "3 of 5 online");
  const first = await text();
  for (const line of ["team", "online alice · online", "busy bob · busy · In a meeting", "away carol · away",
    "offline dave · last seen just now", "offline erin · never seen", `connected to ${url}`]) {
    assert.ok(first.split("\n").includes(line), `missing ${line} in:\n${first}`);
  }
  // The dots: one per member, coloured by the class of its line.
  assert.deepEqual(await page.eval(`[...document.querySelectorAll('#contacts li')].map(li => li.className + ':' + getComputedStyle(li.querySelector('.dot')).backgroundColor)`),
    ["online:rgb(34, 165, 89)", "busy:rgb(217, 59, 59)", "away:rgb(232, 177, 0)", "offline:rgb(163, 169, 181)", "offline:rgb(163, 169, 181)"]);

  // "last seen" follows the broker's clock.
  await broker.advance(5 * 60 * 1000 + 1000);
  await shows("offline dave · last seen 5 min ago");

  await bob.bye();
  await shows("2 of 5 online", "offline bob · last seen just now");

  // The network goes away: the page says so; meanwhile carol leaves and alice gets busy.
  await proxy.cut();
  await shows("reconnecting");
  await carol.bye();
  await alice.setStatus("busy", { text: "on a call" });
  assert.ok((await text()).includes("away carol · away"), "the page cannot know yet");
  await proxy.restore();
  await shows(`connected to ${url}`, "1 of 5 online", "busy alice · busy · on a call", "offline carol · last seen just now");

  // A status text is the user's own words: shown as text, never as markup (no element, no script).
  const markup = `<img src=x onerror="window.__xss=1"><b>hi</b>`;
  await alice.setStatus("busy", { text: markup });
  await broker.advance(100); // the group's batch window, on the test-mode clock
  await shows(`busy alice · busy · ${markup}`);
  assert.equal(await page.eval(`document.querySelectorAll('#contacts img, #contacts b').length + (window.__xss ?? 0)`), 0);
  assert.deepEqual(page.errors, []);
});
