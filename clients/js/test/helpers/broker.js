// Starts a real `rollcall serve` for the tests: the binary from ROLLCALL_BIN, else <repo>/.build/debug/rollcall.
import { execFileSync, spawn } from "node:child_process";
import { createHmac, randomBytes } from "node:crypto";
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { RollCall } from "../../src/index.js";

export const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), "../../../..");
export const rollcallBin = process.env.ROLLCALL_BIN || join(repoRoot, ".build/debug/rollcall");

/** A free loopback port (bound and released at once). */
export function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

/** An HS256 JWT signed with `secret`. */
export function makeToken(secret, { sub, role, expiresIn = 3600, exp } = {}) {
  const b64 = (value) => Buffer.from(JSON.stringify(value)).toString("base64url");
  const claims = { sub, exp: exp ?? Math.floor(Date.now() / 1000) + expiresIn };
  if (role) claims.role = role;
  const body = `${b64({ alg: "HS256", typ: "JWT" })}.${b64(claims)}`;
  return `${body}.${createHmac("sha256", secret).update(body).digest("base64url")}`;
}

/**
 * A broker process. `testMode` (default true): a manual clock, moved with `advance`. `dataDir` keeps state (so a
 * restart restores it); ports are chosen once, so `restart()` binds the same ones.
 */
export class Broker {
  constructor({ testMode = true, tokens = true, dataDir = null, args = [] } = {}) {
    this.testMode = testMode;
    this.args = args;
    this.dir = mkdtempSync(join(tmpdir(), "rollcall-js-"));
    this.dataDir = dataDir === true ? join(this.dir, "data") : dataDir;
    this.secret = tokens ? randomBytes(32).toString("hex") : null;
    if (tokens) writeFileSync(join(this.dir, "jwt.key"), this.secret);
    this.child = null;
    this.stderr = "";
    this.clients = [];
  }

  token(sub, options = {}) {
    return makeToken(this.secret, { sub, ...options });
  }

  /** Starts the broker. Fresh ports are free when chosen, but another process may take one before the broker binds
   * it (a run failed "Address already in use" on a busy machine): then new ones are chosen, up to 3 times. A restart
   * keeps its ports. */
  async start() {
    const fresh = !this.ports;
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.#startOnce();
      } catch (error) {
        if (!fresh || attempt >= 3 || !/Address already in use/.test(error.message)) throw error;
        this.ports = null;
        this.stderr = "";
      }
    }
  }

  async #startOnce() {
    if (!existsSync(rollcallBin)) throw new Error(`no broker binary at ${rollcallBin}: build it (swift build) or set ROLLCALL_BIN`);
    if (!this.ports) this.ports = { command: await freePort(), update: await freePort(), ws: await freePort() };
    const args = [
      "serve", "--print-endpoints", "--log-level", "warning",
      "--command-endpoint", `tcp://127.0.0.1:${this.ports.command}`,
      "--update-endpoint", `tcp://127.0.0.1:${this.ports.update}`,
      "--ws-endpoint", `127.0.0.1:${this.ports.ws}`,
      ...(this.testMode ? ["--test-mode"] : []),
      ...(this.dataDir ? ["--data-dir", this.dataDir] : this.testMode ? [] : ["--ephemeral"]),
      ...(this.secret ? ["--jwt-key-file", join(this.dir, "jwt.key")] : []),
      ...this.args,
    ];
    const child = spawn(rollcallBin, args, { stdio: ["ignore", "pipe", "pipe"] });
    this.child = child;
    child.stderr.on("data", (data) => (this.stderr = (this.stderr + data).slice(-8000)));
    const line = await new Promise((resolve, reject) => {
      let out = "";
      const timer = setTimeout(() => reject(new Error(`the broker did not start within 20 s: ${this.stderr}`)), 20000);
      child.stdout.on("data", (data) => {
        out += data;
        const end = out.indexOf("\n");
        if (end >= 0) {
          clearTimeout(timer);
          resolve(out.slice(0, end));
        }
      });
      child.once("exit", (code) => {
        clearTimeout(timer);
        reject(new Error(`the broker exited (${code}): ${this.stderr}`));
      });
    });
    this.endpoints = JSON.parse(line);
    this.url = `ws://127.0.0.1:${this.ports.ws}/v1/ws`;
    return this;
  }

  /** The seq of `user`'s record as written in the data directory's SQLite file (read with python3's sqlite3), or
   * null: a `kill -9` loses what was not written yet (protocol §10.3), so a test waits for this before killing. */
  writtenSeq(user) {
    const script = `import sqlite3, sys
db = sqlite3.connect("file:" + sys.argv[1] + "?mode=ro", uri=True)
row = db.execute("select seq from users where user = ?", (sys.argv[2],)).fetchone()
print(row[0] if row else "")`;
    try {
      const out = execFileSync("python3", ["-c", script, join(this.dataDir, "rollcall.sqlite3"), user], { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] }).trim();
      return out === "" ? null : Number(out);
    } catch {
      return null;
    }
  }

  /** kill -9, and wait for the process to be gone. */
  async kill9() {
    const child = this.child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const gone = new Promise((resolve) => child.once("exit", resolve));
    child.kill("SIGKILL");
    await gone;
  }

  async restart() {
    await this.kill9();
    return this.start();
  }

  /** A client for the test (an operator by default), closed by `stop()`. */
  client(options = {}) {
    const rc = new RollCall(options.url ?? this.url, {
      token: this.secret ? this.token(options.sub ?? "test-operator", { role: options.role ?? "operator" }) : undefined,
      backoff: { initialMs: 100, maxMs: 1000 },
      ...options,
    });
    this.clients.push(rc);
    return rc;
  }

  /** Moves the test-mode clock. */
  async advance(ms) {
    if (!this.operator) this.operator = this.client();
    return this.operator.call({ op: "advance", ms });
  }

  async stop() {
    await Promise.all(this.clients.splice(0).map((rc) => Promise.race([rc.close(), new Promise((r) => setTimeout(r, 3000))])));
    const child = this.child;
    if (child && child.exitCode === null && child.signalCode === null) {
      const gone = new Promise((resolve) => child.once("exit", resolve));
      child.kill("SIGTERM");
      const timer = setTimeout(() => child.kill("SIGKILL"), 3000);
      await gone;
      clearTimeout(timer);
    }
    rmSync(this.dir, { recursive: true, force: true });
  }
}
