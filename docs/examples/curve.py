#!/usr/bin/env python3
# RollCall over CurveZMQ (pyzmq): a client whose key is bound to USER in the broker's authorized-keys file says
# hello as USER, sets a status and says bye, printing USER's records (raw JSON, one per line) until it has seen USER
# go online, away and offline. It also shows what the broker refuses: a hello as someone else is `forbidden`.
# A broker that does not know the key never answers; the script says so, from the socket monitor
# (HANDSHAKE_FAILED_AUTH, libzmq#3505), and exits 2.
# Usage: curve.py COMMAND_ENDPOINT UPDATE_ENDPOINT SERVER_PUBLIC_KEY KEY_FILE USER    See docs/security.md.
import json, re, sys, zmq
from zmq.utils.monitor import recv_monitor_message

command, update, server_key, key_file, user = sys.argv[1:6]


def certificate(path):  # czmq's certificate format (ZPL), as `rollcall keygen` writes it
    text = open(path).read()
    keys = dict(re.findall(r'^\s*(public-key|secret-key)\s*=\s*"(.{40})"', text, re.M))
    if "secret-key" not in keys:
        sys.exit(f"curve.py: {path} has no secret-key")
    return keys["public-key"].encode(), keys["secret-key"].encode()


public, secret = certificate(key_file)
ctx = zmq.Context()


def curve_socket(kind):  # every socket to a CURVE broker: its public key, and this client's pair
    socket = ctx.socket(kind)
    socket.linger = 0
    socket.curve_serverkey = server_key.encode()
    socket.curve_publickey = public
    socket.curve_secretkey = secret
    return socket


req = curve_socket(zmq.REQ)
handshakes = req.get_monitor_socket(zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_SUCCEEDED)
req.connect(command)
sub = curve_socket(zmq.SUB)
sub.connect(update)
sub.subscribe(f"presence/{user}/")  # an exact topic: a `user` key may subscribe to no wider prefix


def refused():  # whether the broker turned this key away during the handshake
    while handshakes.poll(0):
        if recv_monitor_message(handshakes)["event"] == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
            return True
    return False


def call(op, **fields):  # one request, one reply; the reply's error, if any, is returned, not raised
    req.send_json({"op": op, "id": op, **fields})
    if not req.poll(2000):
        if refused():
            print(f"curve.py: the broker refused key {public.decode()[:8]}…: not in its authorized keys", file=sys.stderr)
            sys.exit(2)
        sys.exit(f"curve.py: no reply to {op} from {command} within 2 s")
    return req.recv_json()


def record():  # the next record of USER, printed as received
    if not sub.poll(2000):
        sys.exit(f"curve.py: no record on presence/{user}/ in 2 s")
    topic, body = sub.recv_multipart()
    print(body.decode(), flush=True)
    return json.loads(body)


print(json.dumps(call("ping")), flush=True)  # the handshake went through
record()  # subscribing sends USER's current record: the subscription is live
other = call("hello", user=f"not-{user}")
print(f"hello as not-{user}: {other['error']['code']}", flush=True)
session = call("hello", user=user, device="curve.py")["session"]
while record()["status"] != "online":
    pass
call("status", session=session, status="away", text="over CURVE")
while record()["status"] != "away":
    pass
call("bye", session=session)
while record()["status"] != "offline":
    pass
