#!/usr/bin/env python3
# RollCall over WebSocket, with Python's `websockets` package (pip install websockets): sign in with TOKEN, follow
# USER, say hello as USER kept alive by the connection, try to say hello as someone else (a user token may not),
# then say bye, printing every frame as received (one JSON object per line). With "hold" it stays connected after
# the hello, sending nothing, until it is killed. Exits non-zero with a message if the server stays silent for 3 s.
# Usage: websocket.py URL TOKEN USER [hold]      See docs/websocket.md.
import asyncio, json, sys

import websockets

url, token, user = sys.argv[1:4]
hold = sys.argv[4:5] == ["hold"]


async def main():
    async with websockets.connect(f"{url}?token={token}") as ws:
        statuses = []  # USER's statuses as the updates told them, in order

        async def frame():  # the next frame, printed as received
            try:
                text = await asyncio.wait_for(ws.recv(), 3)
            except asyncio.TimeoutError:
                sys.exit(f"websocket.py: nothing from {url} in 3 s")
            print(text, flush=True)
            message = json.loads(text)
            if "topic" in message:
                statuses.append(message["message"]["status"])
            return message

        async def until(status):  # waits for an update with that status (maybe already here)
            while status not in statuses:
                await frame()
            del statuses[: statuses.index(status) + 1]

        async def call(op, **fields):  # a request and its reply; updates on the way are printed too
            await ws.send(json.dumps({"op": op, "id": op, **fields}))
            while (reply := await frame()).get("id") != op or "topic" in reply:
                pass
            return reply

        await call("subscribe", topics=[f"presence/{user}/"])
        while not statuses:  # the last value
            await frame()
        statuses.clear()
        # The online update may come before the hello's reply: it is published while the hello is handled.
        hello = await call("hello", user=user, device="websocket.py", keepalive="connection")
        if not hello["ok"]:
            sys.exit(f"websocket.py: hello failed: {hello['error']}")
        await until("online")
        other = await call("hello", user=user + "-not-me")
        print("other user:", other.get("error", {}).get("code"), flush=True)
        if hold:
            print("holding", flush=True)
            await asyncio.Event().wait()
        await call("bye", session=hello["session"])
        await until("offline")


asyncio.run(main())
