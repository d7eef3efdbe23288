// A REAL `toolgate sidecar` for the tests, started as tests/python/conftest.py
// does: the CLI makes keys, builds and signs a bundle from PROFILE, and the
// sidecar enforces it on a temporary SQLite database. Needs the built CLI:
// $TOOLGATE_BIN (default <repo>/target/debug/toolgate). Missing, the tests
// are skipped locally and FAIL under CI=true.
import { execFile, spawn } from "node:child_process";
import { existsSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

const run = promisify(execFile);
export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../..");
export const TENANT = "tstest";

// Low-risk, high-risk, deny, escalate and warn-mode tools, the tools of the
// adapter tests, and the workspace.
export const PROFILE = `\
apiVersion: toolgate.dev/v1alpha1
kind: PolicyProfile
metadata: {name: ts-client, namespace: agents}
spec:
  mode: rules
  rules:
    bash: {deny: ["rm *"], allow: ["echo *"], escalate: ["deploy *"]}
    lookup: {allow: ["*"]}
    transfer: {allow: ["*"]}
    drop_table: {deny: ["*"]}
    publish: {escalate: ["*"]}
    shout: {allow: ["hello *"]}
    weather: {allow: ["*"]}
    send_email: {deny: ["*@evil.example"], escalate: ["*@board.example"], allow: ["*@example.com"]}
    notes.read_note: {allow: ["*"]}
    notes.delete_note: {deny: ["prod*"], escalate: ["*"]}
    notes.write_note: {allow: ["*"]}
    workspace.read: {allow: ["*"]}
    workspace.write: {allow: ["*"]}
    workspace.list: {allow: ["*"]}
    workspace.stat: {allow: ["*"]}
  effects:
    bash:       {sideEffect: PROCESS_EXEC, risk: high, matchArgs: [command]}
    lookup:     {sideEffect: NONE, risk: low, readOnly: true, allowParallel: true}
    transfer:   {sideEffect: EXTERNAL_WRITE, risk: high}
    drop_table: {sideEffect: EXTERNAL_WRITE, risk: high}
    publish:    {sideEffect: EXTERNAL_WRITE, risk: high}
    shout:      {sideEffect: NONE, risk: low, matchArgs: [text], enforcement: warn}
    weather:    {sideEffect: NONE, risk: low, readOnly: true, allowParallel: true}
    send_email: {sideEffect: EXTERNAL_WRITE, risk: high, matchArgs: [to]}
    notes.read_note:   {sideEffect: WORKSPACE_READ, risk: low, readOnly: true, matchArgs: [name]}
    notes.delete_note: {sideEffect: WORKSPACE_WRITE, risk: high, matchArgs: [name]}
    notes.write_note:  {sideEffect: WORKSPACE_WRITE, risk: high, matchArgs: [name]}
    workspace.read:  {sideEffect: WORKSPACE_READ, risk: low, readOnly: true}
    workspace.write: {sideEffect: WORKSPACE_WRITE, risk: write}
    workspace.list:  {sideEffect: WORKSPACE_READ, risk: low, readOnly: true}
    workspace.stat:  {sideEffect: WORKSPACE_READ, risk: low, readOnly: true}
  approvals: {ttlSeconds: 300}
`;

/** The CLI, or undefined when it is missing outside CI (then tests skip). */
export function toolgateBin() {
  const target = process.env.CARGO_TARGET_DIR || path.join(ROOT, "target");
  const bin = process.env.TOOLGATE_BIN || path.join(target, "debug", "toolgate");
  if (existsSync(bin)) return bin;
  if (process.env.CI === "true") {
    throw new Error(`${bin} not found: build it with \`cargo build -p toolgate\` (or set $TOOLGATE_BIN)`);
  }
  return undefined;
}

/** `describe` options: skip (outside CI) when there is no CLI; under CI=true, throws. */
export function needsSidecar() {
  return { skip: toolgateBin() ? false : "no toolgate CLI (set $TOOLGATE_BIN)" };
}

export function freePort() {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

async function ready(opsUrl) {
  try {
    const r = await fetch(`${opsUrl}/readyz`, { signal: AbortSignal.timeout(1000) });
    return r.status === 200;
  } catch {
    return false;
  }
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Starts a sidecar on PROFILE; `stop()` kills it and removes its directory. */
export async function startSidecar() {
  const bin = toolgateBin();
  if (!bin) throw new Error("no toolgate CLI");
  const dir = mkdtempSync(path.join(tmpdir(), "toolgate-ts-"));
  await run(bin, ["keygen", "--out", path.join(dir, "keys")]);
  writeFileSync(path.join(dir, "profile.yaml"), PROFILE);
  await run(bin, [
    "bundle",
    "build",
    "--profile",
    path.join(dir, "profile.yaml"),
    "--key",
    path.join(dir, "keys", "signing.key"),
    "--sequence",
    "1",
    "--valid-for",
    "1h",
    "--out",
    path.join(dir, "bundle.json"),
  ]);
  const database = `sqlite://${path.join(dir, "toolgate.db")}?mode=rwc`;
  const logPath = path.join(dir, "sidecar.log");
  for (let attempt = 0; attempt < 3; attempt++) {
    // a free port can be taken between probe and bind
    const [port, opsPort] = [await freePort(), await freePort()];
    const log = openSync(logPath, "w");
    const proc = spawn(
      bin,
      [
        "sidecar",
        "--bundle",
        path.join(dir, "bundle.json"),
        "--trust",
        path.join(dir, "keys", "signing.pub"),
        "--database",
        database,
        "--listen",
        `127.0.0.1:${port}`,
        "--ops-listen",
        `127.0.0.1:${opsPort}`,
        "--workspace-base",
        path.join(dir, "workspaces"),
        "--tenant",
        TENANT,
        "--pod-name",
        "ts-agent",
        "--pod-namespace",
        "agents",
      ],
      { stdio: ["ignore", log, log], env: { ...process.env, RUST_LOG: "warn" } },
    );
    let exited = false;
    proc.once("exit", () => {
      exited = true;
    });
    const opsUrl = `http://127.0.0.1:${opsPort}`;
    const deadline = Date.now() + 30_000;
    while (Date.now() < deadline && !exited && !(await ready(opsUrl))) await sleep(50);
    if (!exited && (await ready(opsUrl))) {
      return {
        url: `http://127.0.0.1:${port}`,
        opsUrl,
        database,
        bin,
        dir,
        async stop() {
          if (!exited) {
            const gone = new Promise((r) => proc.once("exit", r));
            proc.kill("SIGTERM");
            const timer = setTimeout(() => proc.kill("SIGKILL"), 10_000);
            await gone;
            clearTimeout(timer);
          }
          rmSync(dir, { recursive: true, force: true });
        },
      };
    }
    proc.kill("SIGKILL");
  }
  throw new Error(`sidecar did not become ready:\n${readFileSync(logPath, "utf8").slice(-5000)}`);
}

/** Approves (or denies) an approval with the real `toolgate approvals` CLI after `delayMs`. */
export async function resolveLater(sidecar, approvalId, { delayMs = 500, verb = "approve" } = {}) {
  await sleep(delayMs);
  await run(sidecar.bin, [
    "approvals",
    verb,
    approvalId,
    "--database",
    sidecar.database,
    "--by",
    "alice",
    "--reason",
    "ts-test",
  ]);
}

/** A run id of its own for each test, so approvals and intents never mix. */
let seq = 0;
export function runId(name) {
  return `ts-${name}-${process.pid}-${Date.now()}-${seq++}`.toLowerCase().replace(/[^a-z0-9.:_-]/g, "-");
}
