# A ZeroMQ subscriber for the JavaScript client's tests: subscribes to the topics given and prints every message as
# one JSON line {"topic": ..., "message": ...}; prints {"ready": true} once its subscriptions are active (the first
# broker heartbeat has come). Usage: zmq_watch.py UPDATE_ENDPOINT TOPIC...
import json, sys

import zmq

endpoint, topics = sys.argv[1], sys.argv[2:]
socket = zmq.Context().socket(zmq.SUB)
socket.connect(endpoint)
for topic in topics + ["broker/"]:
    socket.setsockopt(zmq.SUBSCRIBE, topic.encode())
ready = False
while True:
    topic, body = socket.recv_multipart()
    topic = topic.decode()
    if topic == "broker/":
        if not ready:
            ready = True
            print(json.dumps({"ready": True}), flush=True)
        if "broker/" not in topics:
            continue
    print(json.dumps({"topic": topic, "message": json.loads(body)}), flush=True)
