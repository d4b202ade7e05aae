// Headless Chromium (Debian's package) driven over the DevTools protocol with Node's own WebSocket.
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { until } from "./wait.js";

export const chromiumPath = ["/usr/bin/chromium", "/usr/bin/chromium-browser"].find((p) => existsSync(p)) ?? null;

export class Chromium {
  async launch() {
    this.profile = mkdtempSync(join(tmpdir(), "rollcall-chromium-"));
    this.child = spawn(chromiumPath, [
      "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
      "--window-size=480,700", `--user-data-dir=${this.profile}`, "--remote-debugging-port=0", "about:blank",
    ], { stdio: ["ignore", "ignore", "pipe"], detached: true });
    const endpoint = await new Promise((resolve, reject) => {
      let err = "";
      const timer = setTimeout(() => reject(new Error(`chromium did not start its DevTools endpoint: ${err}`)), 20000);
      this.child.stderr.on("data", (data) => {
        err += data;
        const m = /DevTools listening on (ws:\/\/\S+)/.exec(err);
        if (m) {
          clearTimeout(timer);
          resolve(m[1]);
        }
      });
      this.child.once("exit", (code) => reject(new Error(`chromium exited (${code}): ${err}`)));
    });
    this.ws = new WebSocket(endpoint);
    this.nextId = 1;
    this.pending = new Map();
    this.listeners = new Set();
    this.ws.onmessage = (event) => {
      const message = JSON.parse(event.data);
      if (message.id && this.pending.has(message.id)) {
        const { resolve, reject } = this.pending.get(message.id);
        this.pending.delete(message.id);
        if (message.error) reject(new Error(`${message.error.message}`));
        else resolve(message.result);
      } else if (message.method) {
        for (const fn of this.listeners) fn(message);
      }
    };
    await new Promise((resolve, reject) => {
      this.ws.onopen = resolve;
      this.ws.onerror = () => reject(new Error("could not reach chromium's DevTools endpoint"));
    });
    return this;
  }

  /** A DevTools command (on a page's session if given), with a 10 s deadline. */
  send(method, params = {}, sessionId) {
    const id = this.nextId++;
    this.ws.send(JSON.stringify({ id, method, params, ...(sessionId ? { sessionId } : {}) }));
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new Error(`${method}: no answer within 10 s`));
      }, 10000);
      this.pending.set(id, {
        resolve: (v) => (clearTimeout(timer), resolve(v)),
        reject: (e) => (clearTimeout(timer), reject(e)),
      });
    });
  }

  /** Opens a page; returns a handle to evaluate in it. */
  async open(url) {
    const { targetId } = await this.send("Target.createTarget", { url: "about:blank" });
    const { sessionId } = await this.send("Target.attachToTarget", { targetId, flatten: true });
    const page = new Page(this, sessionId, targetId);
    await this.send("Runtime.enable", {}, sessionId);
    this.listeners.add((message) => {
      if (message.sessionId !== sessionId) return;
      if (message.method === "Runtime.exceptionThrown") page.errors.push(message.params.exceptionDetails);
      if (message.method === "Runtime.consoleAPICalled") page.console.push(message.params.args.map((a) => a.value ?? a.description).join(" "));
    });
    await this.send("Page.navigate", { url }, sessionId);
    return page;
  }

  /**
   * Closes the browser and every helper process it started (its own process group), then removes its profile.
   * Never throws: a profile left behind in the temporary directory must not fail a test, nor keep its after hook
   * from closing the broker and the servers.
   */
  async close() {
    try {
      this.ws?.close();
    } catch {}
    if (this.child) {
      const gone = this.child.exitCode === null && this.child.signalCode === null
        ? new Promise((resolve) => this.child.once("exit", resolve))
        : Promise.resolve();
      try {
        process.kill(-this.child.pid, "SIGKILL"); // the browser, its zygote, renderers and utilities
      } catch {}
      await Promise.race([gone, new Promise((resolve) => setTimeout(resolve, 5000))]);
      this.child.stderr?.destroy();
    }
    if (!this.profile) return;
    // Helpers killed with the group may still be letting go of files for a moment: retry, then leave it.
    for (let attempt = 0; attempt < 20; attempt++) {
      try {
        rmSync(this.profile, { recursive: true, force: true });
        return;
      } catch {
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    }
    console.error(`chromium's profile ${this.profile} could not be removed; left in place`);
  }
}

class Page {
  constructor(browser, sessionId, targetId) {
    this.browser = browser;
    this.sessionId = sessionId;
    this.targetId = targetId;
    this.errors = [];
    this.console = [];
  }

  /** The value of an expression in the page (awaited if it is a promise). */
  async eval(expression) {
    const result = await this.browser.send(
      "Runtime.evaluate", { expression, returnByValue: true, awaitPromise: true }, this.sessionId);
    if (result.exceptionDetails) throw new Error(`in the page: ${result.exceptionDetails.exception?.description ?? result.exceptionDetails.text}`);
    return result.result.value;
  }

  /** Waits (with a deadline) until `expression` is truthy in the page; returns its value. */
  waitFor(expression, what, timeoutMs = 10000) {
    return until(() => this.eval(expression), `${what} (page errors: ${this.errors.map((e) => e.exception?.description ?? e.text).join("; ") || "none"})`, timeoutMs);
  }

  navigate(url) {
    return this.browser.send("Page.navigate", { url }, this.sessionId);
  }
}
