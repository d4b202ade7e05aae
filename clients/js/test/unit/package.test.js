// `npm pack` makes a tarball that installs offline into an app and imports by its name, with its types.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const packageDir = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const npm = spawnSync("npm", ["--version"]).status === 0;

test("npm pack makes a tarball that installs offline and imports by name", { skip: !npm && "no npm on the PATH" }, () => {
  const dir = mkdtempSync(join(tmpdir(), "rollcall-pack-"));
  try {
    execFileSync("npm", ["pack", packageDir, "--pack-destination", dir], { stdio: "pipe" });
    const tarball = readdirSync(dir).find((name) => name.endsWith(".tgz"));
    assert.ok(tarball, "a tarball");
    const app = join(dir, "app");
    execFileSync("mkdir", [app]);
    writeFileSync(join(app, "package.json"), JSON.stringify({ name: "app", private: true, type: "module" }));
    execFileSync("npm", ["install", "--offline", "--no-audit", "--no-fund", join(dir, tarball)], { cwd: app, stdio: "pipe" });
    const installed = join(app, "node_modules/rollcall-client");
    assert.ok(existsSync(join(installed, "src/index.d.ts")), "the declarations are in it");
    assert.ok(!existsSync(join(installed, "test")), "the tests are not");
    const out = execFileSync(process.execPath, ["-e", 'import("rollcall-client").then((m) => console.log(typeof m.RollCall, typeof m.Store))'], { cwd: app, encoding: "utf8" });
    assert.equal(out.trim(), "function function");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
