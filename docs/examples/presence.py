#!/usr/bin/env python3
# RollCall protocol v1 example and interop test (pyzmq): say hello as USER, heartbeat once, say bye,
# printing USER's presence records (the raw JSON bodies, one per line) until it has seen USER go
# online and then offline. Exits non-zero with a message if the broker stays silent for 2 seconds.
# Usage: presence.py [COMMAND_ENDPOINT] [UPDATE_ENDPOINT] [USER]   See docs/protocol.md.
import json, sys, zmq

defaults = ["tcp://127.0.0.1:7730", "tcp://127.0.0.1:7731", "py-alice"]
command, update, user = sys.argv[1:4] + defaults[len(sys.argv[1:4]):]
ctx = zmq.Context()
sub = ctx.socket(zmq.SUB); sub.linger = 0; sub.connect(update); sub.subscribe(f"presence/{user}/")
req = ctx.socket(zmq.REQ); req.linger = 0; req.connect(command)

def record():  # the next record of USER, printed as received
    if not sub.poll(2000):
        sys.exit(f"presence.py: no record on presence/{user}/ from {update} in 2 s (broker down? bad user id?)")
    topic, body = sub.recv_multipart()
    print(body.decode(), flush=True)
    return json.loads(body)

def call(op, **fields):  # one request, one reply (REQ is lock-step)
    req.send_json({"op": op, "id": op, **fields})
    if not req.poll(2000): sys.exit(f"presence.py: no reply to {op} from {command} within 2 s")
    reply = req.recv_json()
    if not reply["ok"]: sys.exit(f"presence.py: {op} failed: {reply['error']['code']}: {reply['error']['message']}")
    return reply

record()  # subscribing to presence/USER/ sends USER's current record: the subscription is now live
session = call("hello", user=user, device="presence.py")["session"]
while record()["status"] != "online": pass
call("heartbeat", session=session)
call("bye", session=session)
while record()["status"] != "offline": pass
