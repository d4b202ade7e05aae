// A TCP proxy the tests cut and restore, standing for a network that goes away (a WebSocket stays open when
// Chromium's network emulation goes offline, so the tests cut the TCP connections themselves).
import { createServer, connect } from "node:net";

export class CuttableProxy {
  constructor(targetPort) {
    this.targetPort = targetPort;
    this.sockets = new Set();
    this.server = null;
  }

  async listen(port = 0) {
    this.server = createServer((client) => {
      const upstream = connect(this.targetPort, "127.0.0.1");
      for (const socket of [client, upstream]) {
        this.sockets.add(socket);
        socket.on("close", () => this.sockets.delete(socket));
        socket.on("error", () => {});
      }
      client.pipe(upstream);
      upstream.pipe(client);
      client.on("close", () => upstream.destroy());
      upstream.on("close", () => client.destroy());
    });
    await new Promise((resolve) => this.server.listen(port, "127.0.0.1", resolve));
    this.port = this.server.address().port;
    return this;
  }

  /** Resets every connection and refuses new ones (as a network that is gone, or a broker that is unreachable). */
  async cut() {
    const closed = new Promise((resolve) => this.server.close(resolve));
    for (const socket of this.sockets) socket.resetAndDestroy ? socket.resetAndDestroy() : socket.destroy();
    await closed;
  }

  /** Accepts connections again, on the same port. */
  restore() {
    return this.listen(this.port);
  }

  async close() {
    for (const socket of this.sockets) socket.destroy();
    if (this.server?.listening) await new Promise((resolve) => this.server.close(resolve));
  }
}
