#!/usr/bin/env python3
# Drives docs/examples/web/index.html in headless Chromium over the DevTools protocol (with Python's `websockets`),
# so that the page is checked as a person sees it. For each EXPECTED text it waits (at most 10 s) until the page
# shows it, prints "seen: <the page's lines>" and, with --shots DIR, saves a screenshot DIR/<n>.png. A test changes
# the broker's state once it reads a "seen" line, and the next expectation waits for the page to show the change.
# Usage: drive.py [--shots DIR] PAGE_URL EXPECTED [EXPECTED...]
import asyncio, base64, json, os, re, shutil, subprocess, sys, tempfile

import websockets

args = sys.argv[1:]
shots = None
if args[:1] == ["--shots"]:
    shots, args = args[1], args[2:]
page_url, expectations = args[0], args[1:]
chromium = shutil.which("chromium") or shutil.which("chromium-browser") or sys.exit("drive.py: no chromium on PATH")

PAGE_TEXT = """[document.getElementById('title').textContent, document.getElementById('summary').textContent,
  ...[...document.querySelectorAll('#contacts li')].map(li => li.className + ' ' + li.innerText.replace(/\\n/g, ' · ')),
  document.getElementById('connection').textContent].join('\\n')"""


async def main():
    profile = tempfile.mkdtemp(prefix="rollcall-drive-")
    browser = subprocess.Popen(
        [chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
         "--window-size=480,600", f"--user-data-dir={profile}", "--remote-debugging-port=0",
         # the page imports the JavaScript client as an ES module, which Chromium refuses on file:// pages without it
         "--allow-file-access-from-files", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        endpoint = None
        for line in browser.stderr:  # "DevTools listening on ws://127.0.0.1:PORT/devtools/browser/ID"
            if m := re.search(r"DevTools listening on (ws://\S+)", line):
                endpoint = m.group(1)
                break
        if not endpoint:
            sys.exit("drive.py: chromium did not start its DevTools endpoint")
        async with websockets.connect(endpoint, max_size=2**26) as cdp:
            ids = iter(range(1, 1 << 30))

            async def send(method, session=None, **params):
                request_id = next(ids)
                message = {"id": request_id, "method": method, "params": params}
                if session:
                    message["sessionId"] = session
                await cdp.send(json.dumps(message))
                while True:
                    reply = json.loads(await asyncio.wait_for(cdp.recv(), 10))
                    if reply.get("id") == request_id:
                        if "error" in reply:
                            sys.exit(f"drive.py: {method}: {reply['error']}")
                        return reply["result"]

            target = (await send("Target.createTarget", url=page_url))["targetId"]
            session = (await send("Target.attachToTarget", targetId=target, flatten=True))["sessionId"]
            for number, expected in enumerate(expectations, 1):
                deadline = asyncio.get_running_loop().time() + 10
                text = ""
                while asyncio.get_running_loop().time() < deadline:
                    result = await send("Runtime.evaluate", session, expression=PAGE_TEXT, returnByValue=True)
                    text = result["result"].get("value", "")
                    if expected in text:
                        break
                    await asyncio.sleep(0.05)  # the page has no event to wait on from here: look again shortly
                else:
                    sys.exit(f"drive.py: the page never showed {expected!r} within 10 s; it shows:\n{text}")
                if shots:
                    shot = await send("Page.captureScreenshot", session, format="png")
                    with open(os.path.join(shots, f"{number}.png"), "wb") as file:
                        file.write(base64.b64decode(shot["data"]))
                print("seen: " + text.replace("\n", " | "), flush=True)
    finally:
        browser.kill()
        browser.wait()
        shutil.rmtree(profile, ignore_errors=True)


asyncio.run(main())
