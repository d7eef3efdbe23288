// `npm pack` makes an installable tarball: installed into an empty project,
// its main entry and every adapter subpath import, with their declarations.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

const run = promisify(execFile);
const PKG = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const npm = process.platform === "win32" ? "npm.cmd" : "npm";

test("npm pack makes a tarball that installs and imports", { timeout: 180_000 }, async () => {
  const dir = mkdtempSync(path.join(tmpdir(), "toolgate-ts-pack-"));
  try {
    // --ignore-scripts: dist/ is already built by `npm test`'s pretest.
    const { stdout } = await run(npm, ["pack", "--json", "--ignore-scripts", "--pack-destination", dir], { cwd: PKG });
    const [{ filename, files }] = JSON.parse(stdout);
    const names = files.map((f) => f.path);
    for (const f of [
      "dist/index.js",
      "dist/index.d.ts",
      "dist/adapters/ai.js",
      "dist/adapters/mcp.d.ts",
      "README.md",
    ]) {
      assert.ok(names.includes(f), `${f} is packed`);
    }
    assert.ok(!names.some((f) => f.startsWith("test/") || f.startsWith("src/") || f.includes("node_modules")));
    const app = path.join(dir, "app");
    mkdirSync(app);
    await run(npm, ["init", "-y"], { cwd: app });
    await run(npm, ["install", "--no-audit", "--no-fund", path.join(dir, path.basename(filename))], { cwd: app });
    const script = `
      import { Toolgate, ErrorCode, Denied } from "@toolgate/client";
      import { governTool } from "@toolgate/client/ai";
      import { governTool as agentsTool } from "@toolgate/client/openai-agents";
      import { governClient } from "@toolgate/client/mcp";
      const tg = new Toolgate({ url: "http://127.0.0.1:1" });
      console.log(JSON.stringify([typeof governTool, typeof agentsTool, typeof governClient, ErrorCode.POLICY_DENIED,
        new Denied(undefined).code, tg.url]));`;
    writeFileSync(path.join(app, "check.mjs"), script);
    const out = await run(process.execPath, ["check.mjs"], { cwd: app });
    assert.deepEqual(JSON.parse(out.stdout), [
      "function",
      "function",
      "function",
      "policy_denied",
      "policy_denied",
      "http://127.0.0.1:1",
    ]);
    const installed = path.join(app, "node_modules", "@toolgate", "client");
    assert.ok(existsSync(path.join(installed, "dist", "adapters", "openai-agents.d.ts")));
    // No runtime dependencies came along.
    assert.deepEqual(
      (await run(npm, ["ls", "--all", "--parseable"], { cwd: app })).stdout.trim().split("\n").length,
      2,
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
