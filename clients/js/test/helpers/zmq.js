// The ZeroMQ side of the tests: a python3 + pyzmq subscriber as a child process (zmq_watch.py).
import { spawn } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { until } from "./wait.js";

const script = join(dirname(fileURLToPath(import.meta.url)), "zmq_watch.py");

export class ZmqWatcher {
  constructor(endpoint, topics) {
    this.messages = [];
    this.ready = false;
    this.child = spawn("python3", [script, endpoint, ...topics], { stdio: ["ignore", "pipe", "inherit"] });
    let buffer = "";
    this.child.stdout.on("data", (data) => {
      buffer += data;
      for (let end = buffer.indexOf("\n"); end >= 0; end = buffer.indexOf("\n")) {
        const line = JSON.parse(buffer.slice(0, end));
        buffer = buffer.slice(end + 1);
        if (line.ready) this.ready = true;
        else this.messages.push(line);
      }
    });
  }

  async started() {
    await until(() => this.ready, "the ZeroMQ subscriber's first heartbeat", 10000);
    return this;
  }

  /** The records of `user` seen so far. */
  records(user) {
    return this.messages.filter((m) => m.topic === `presence/${user}/`).map((m) => m.message);
  }

  find(predicate, what, timeoutMs = 10000) {
    return until(() => this.messages.map((m) => m.message).find(predicate), what, timeoutMs);
  }

  stop() {
    this.child.kill("SIGKILL");
  }
}
