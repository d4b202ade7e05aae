#!/usr/bin/env python3
# RollCall groups example and interop test (pyzmq): open sessions for py-a, py-b, py-c; define GROUP as py-a..py-e;
# follow group/GROUP/, printing "GROUP: N of M online" per message, until 3 of 5; say bye for py-c and wait for 2 of 5;
# delete the group. Exits non-zero with a message if anything it waits for stays silent for 2 seconds.
# Usage: group.py [COMMAND_ENDPOINT] [UPDATE_ENDPOINT] [GROUP]   See docs/groups.md and docs/protocol.md.
import json, sys, zmq
defaults = ["tcp://127.0.0.1:7730", "tcp://127.0.0.1:7731", "py-team"]
command, update, group = sys.argv[1:4] + defaults[len(sys.argv[1:4]):]
ctx = zmq.Context()
req = ctx.socket(zmq.REQ); req.linger = 0; req.connect(command)
sub = ctx.socket(zmq.SUB); sub.linger = 0; sub.connect(update)

def call(op, **fields):  # one request, one reply (REQ is lock-step)
    req.send_json({"op": op, "id": op, **fields})
    if not req.poll(2000): sys.exit(f"group.py: no reply to {op} from {command} within 2 s")
    reply = req.recv_json()
    if not reply["ok"]: sys.exit(f"group.py: {op} failed: {reply['error']['code']}: {reply['error']['message']}")
    return reply

def wait_for(online, total):  # print each group message until one says ONLINE of TOTAL
    while sub.poll(2000):
        message = json.loads(sub.recv_multipart()[1])
        print(f"{group}: {message.get('online', 0)} of {message.get('total', 0)} online", flush=True)
        if (message.get("online"), message.get("total")) == (online, total): return
    sys.exit(f"group.py: no '{online} of {total} online' on group/{group}/ from {update} within 2 s")

sessions = {user: call("hello", user=user, device="group.py")["session"] for user in ["py-a", "py-b", "py-c"]}
call("group", group=group, members=["py-a", "py-b", "py-c", "py-d", "py-e"])
sub.subscribe(f"group/{group}/")  # the broker answers a new subscription with the group's aggregate
wait_for(3, 5)
call("bye", session=sessions["py-c"])
wait_for(2, 5)
call("ungroup", group=group)
for user in ["py-a", "py-b"]: call("bye", session=sessions[user])
