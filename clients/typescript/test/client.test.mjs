// The client against a real sidecar process (see sidecar.mjs).
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import {
  ApprovalRequired,
  Conflict,
  Denied,
  ErrorCode,
  Forbidden,
  InvalidRequest,
  NotFound,
  RunCancelled,
  Toolgate,
  ToolgateError,
  WorkspaceError,
} from "@toolgate/client";

import { needsSidecar, resolveLater, runId, startSidecar } from "./sidecar.mjs";

describe("Toolgate against a real sidecar", needsSidecar(), () => {
  let sidecar;
  const client = (name, options = {}) => new Toolgate({ url: sidecar.url, runId: runId(name), ...options });
  before(async () => {
    sidecar = await startSidecar();
  });
  after(async () => {
    await sidecar?.stop();
  });

  test("url defaults to $TOOLGATE_URL, run id to a fresh UUID", async () => {
    const saved = process.env.TOOLGATE_URL;
    try {
      process.env.TOOLGATE_URL = `${sidecar.url}/`;
      const a = new Toolgate();
      const b = new Toolgate();
      assert.equal(a.url, sidecar.url);
      assert.match(a.runId, /^[0-9a-f-]{36}$/);
      assert.notEqual(a.runId, b.runId);
      assert.equal((await a.authorize({ tool: "lookup", arguments: { q: "x" } })).verdict, "allow");
      delete process.env.TOOLGATE_URL;
      assert.throws(() => new Toolgate(), /TOOLGATE_URL/);
      assert.throws(() => new Toolgate({ url: "127.0.0.1:1" }), /http\(s\)/);
    } finally {
      if (saved === undefined) delete process.env.TOOLGATE_URL;
      else process.env.TOOLGATE_URL = saved;
    }
  });

  test("authorize answers every verdict with its fields camelCased", async () => {
    const tg = client("verdicts");
    const low = await tg.authorize({ tool: "lookup", arguments: { q: "weather" }, stepId: "s1" });
    assert.deepEqual(
      [low.verdict, low.reason, low.risk, low.intentRequired, low.enforced, low.matchedRule, low.approvalId],
      ["allow", "allow_rule", "low", false, true, "allow:lookup:*", null],
    );
    assert.ok(low.decisionId && low.policyVersion.startsWith("ts-client@"));
    assert.match(low.argsDigest, /^sha256:/);
    assert.match(low.callDigest, /^sha256:/);
    assert.deepEqual(low.flowLabelsSet, []);
    assert.ok(!("decision_id" in low), "keys are camelCased");

    const high = await tg.authorize({ tool: "transfer", arguments: { amount: 5 } });
    assert.equal(high.verdict, "allow");
    assert.equal(high.intentRequired, true);

    const deny = await tg.authorize({ tool: "bash", arguments: { command: "rm -rf /" } });
    assert.deepEqual([deny.verdict, deny.reason, deny.matchedRule], ["deny", "deny_rule", "deny:bash:rm *"]);

    const esc = await tg.authorize({ tool: "publish", arguments: { package: "x" }, action: "release" });
    assert.deepEqual([esc.verdict, esc.reason], ["escalate", "escalate_rule"]);
    assert.ok(esc.approvalId);

    const unknown = await tg.authorize({ tool: "format_disk", arguments: {} });
    assert.deepEqual([unknown.verdict, unknown.reason], ["deny", "unknown_tool"]);

    // A warn-mode tool: allowed, not enforced, the would-be refusal surfaced.
    const warnings = [];
    const warned = client("warn", { onWarning: (m, v) => warnings.push([m, v.decisionId]) });
    const w = await warned.authorize({ tool: "shout", arguments: { text: "bye" } });
    assert.deepEqual([w.verdict, w.reason, w.enforced, w.wouldVerdict], ["allow", "not_enforced", false, "deny"]);
    assert.ok(w.warning);
    assert.equal(warnings.length, 1);
    assert.match(warnings[0][0], /^toolgate: shout: /);
    assert.equal(warnings[0][1], w.decisionId);
  });

  test("guard runs an allowed low-risk call without an intent", async () => {
    const tg = client("guard-low");
    assert.equal(await tg.guard("lookup", { q: "x" }, () => "result"), "result");
    assert.equal(await tg.guard("lookup", { q: "y" }, async () => "async result"), "async result");
    assert.deepEqual(await tg.intents.pending(), []);
  });

  test("guard records a high-risk call's intent, effect-sent before fn, closed after", async () => {
    const tg = client("guard-high");
    let during;
    const out = await tg.guard(
      "transfer",
      { amount: 5, to: "acct-1" },
      async () => {
        during = await tg.intents.pending();
        return "moved";
      },
      { stepId: "s1" },
    );
    assert.equal(out, "moved");
    assert.equal(during.length, 1);
    assert.deepEqual([during[0].tool, during[0].status, during[0].resume], ["transfer", "pending", "uncertain"]);
    assert.ok(during[0].effectSentAt);
    assert.deepEqual(await tg.intents.pending(), []);
    // Closed already: repeating its outcome answers the row, another outcome conflicts.
    const row = await tg.intents.complete(during[0].intentId, "completed");
    assert.deepEqual([row.status, row.tool, row.stepId], ["completed", "transfer", "s1"]);
    await assert.rejects(
      tg.intents.complete(during[0].intentId, "error"),
      (e) => e instanceof Conflict && e.code === ErrorCode.CONFLICT && e.status === 409,
    );
  });

  test("guard closes the intent as error when fn throws, and rethrows", async () => {
    const tg = client("guard-error");
    let id;
    await assert.rejects(
      tg.guard("bash", { command: "echo deploying" }, async () => {
        [{ intentId: id }] = await tg.intents.pending();
        throw new RangeError("disk on fire");
      }),
      /disk on fire/,
    );
    assert.ok(id);
    assert.deepEqual(await tg.intents.pending(), []);
    const row = await tg.intents.complete(id, "error");
    assert.deepEqual([row.status, row.detail], ["error", "RangeError: disk on fire"]);
    assert.ok(row.effectSentAt);
  });

  test("guard never runs a denied call", async () => {
    const tg = client("guard-deny");
    let ran = false;
    await assert.rejects(
      tg.guard("bash", { command: "rm -rf /" }, () => {
        ran = true;
      }),
      (e) => {
        assert.ok(e instanceof Denied && e instanceof ToolgateError);
        assert.deepEqual([e.code, e.reason, e.matchedRule], ["policy_denied", "deny_rule", "deny:bash:rm *"]);
        assert.ok(e.decisionId && e.verdict.decisionId === e.decisionId);
        return true;
      },
    );
    assert.equal(ran, false);
    assert.deepEqual(await tg.intents.pending(), []);
  });

  test("guard on an escalation without waiting throws ApprovalRequired", async () => {
    const tg = client("guard-escalate");
    let ran = false;
    const err = await tg
      .guard("publish", { package: "toolgate" }, () => {
        ran = true;
      })
      .catch((e) => e);
    assert.ok(err instanceof ApprovalRequired);
    assert.deepEqual([err.code, err.approvalStatus], ["approval_required", "pending"]);
    assert.equal(ran, false);
    const a = await tg.approvals.get(err.approvalId);
    assert.deepEqual([a.approvalId, a.status, a.tool, a.runId], [err.approvalId, "pending", "publish", tg.runId]);
    assert.equal(await tg.approvals.wait(err.approvalId, 0), "pending");
  });

  test("guard waits for a human's approval (CLI), then runs the call once", async () => {
    const tg = client("guard-approved");
    const first = await tg.authorize({ tool: "bash", arguments: { command: "deploy prod" }, stepId: "s9" });
    assert.equal(first.verdict, "escalate");
    const approving = resolveLater(sidecar, first.approvalId, { delayMs: 500 });
    let ran = 0;
    const out = await tg.guard(
      "bash",
      { command: "deploy prod" },
      () => {
        ran++;
        return "deployed";
      },
      { stepId: "s9", approvalTimeoutMs: 20_000 },
    );
    await approving;
    assert.deepEqual([out, ran], ["deployed", 1]);
    const a = await tg.approvals.get(first.approvalId);
    assert.deepEqual([a.status, a.resolvedBy], ["approved", "alice"]);
    assert.deepEqual(await tg.intents.pending(), []);
    // One approval, one use: the same call asks again.
    const again = await tg.authorize({ tool: "bash", arguments: { command: "deploy prod" }, stepId: "s9" });
    assert.equal(again.verdict, "escalate");
  });

  test("guard refuses a call the human denied", async () => {
    const tg = client("guard-refused");
    const first = await tg.authorize({ tool: "publish", arguments: { package: "evil" } });
    const denying = resolveLater(sidecar, first.approvalId, { delayMs: 300, verb: "deny" });
    let ran = false;
    const err = await tg
      .guard(
        "publish",
        { package: "evil" },
        () => {
          ran = true;
        },
        { approvalTimeoutMs: 20_000 },
      )
      .catch((e) => e);
    await denying;
    assert.ok(err instanceof Denied, String(err));
    assert.deepEqual([err.code, err.reason, ran], ["policy_denied", "approval_denied", false]);
    assert.equal(await tg.approvals.wait(first.approvalId, 1000), "denied");
  });

  test("authorizeBatch decides each call and says whether they may run in parallel", async () => {
    const tg = client("batch");
    const ok = await tg.authorizeBatch([
      { tool: "lookup", arguments: { q: "a" } },
      { tool: "weather", arguments: { city: "Oslo" }, stepId: "s2" },
    ]);
    assert.deepEqual([ok.parallel, ok.reason], [true, "batch_parallel"]);
    assert.deepEqual(
      ok.verdicts.map((v) => v.verdict),
      ["allow", "allow"],
    );
    assert.ok(ok.verdicts.every((v) => v.decisionId && v.callDigest));

    const mixed = await tg.authorizeBatch([
      { tool: "lookup", arguments: { q: "b" } },
      { tool: "drop_table", arguments: { table: "users" } },
    ]);
    assert.deepEqual([mixed.parallel, mixed.reason, mixed.callIndex], [false, "batch_denied", 1]);
    assert.deepEqual(
      mixed.verdicts.map((v) => v.reason),
      ["allow_rule", "deny_rule"],
    );
    await assert.rejects(tg.authorizeBatch([]), TypeError);
  });

  test("intents: begin, effect-sent, complete, resume; one per decision", async () => {
    const tg = client("intents");
    const v = await tg.authorize({ tool: "transfer", arguments: { amount: 10 }, stepId: "s1" });
    const intent = await tg.intents.begin(v, "transfer", { stepId: "s1" });
    assert.equal(intent.status, "pending");
    let [p] = await tg.intents.pending();
    assert.deepEqual(
      [p.intentId, p.resume, p.tool, p.decisionId],
      [intent.intentId, "safe_to_retry", "transfer", v.decisionId],
    );
    const sent = await tg.intents.markEffectSent(intent.intentId);
    assert.ok(sent.effectSentAt);
    [p] = await tg.intents.pending({ runId: tg.runId });
    assert.equal(p.resume, "uncertain");
    const done = await tg.intents.complete(intent.intentId, "not_completed", "cancelled by user");
    assert.deepEqual([done.status, done.detail], ["not_completed", "cancelled by user"]);
    assert.deepEqual(await tg.intents.pending(), []);
    await assert.rejects(
      tg.intents.begin(v, "transfer", { stepId: "s1" }),
      (e) => e instanceof Conflict && e.code === ErrorCode.INTENT_EXISTS && e.status === 409,
    );
    // A low-risk decision needs no intent, and gets none.
    const low = await tg.authorize({ tool: "lookup", arguments: { q: "z" } });
    await assert.rejects(
      tg.intents.begin(low, "lookup"),
      (e) => e instanceof Forbidden && e.code === ErrorCode.DECISION_NOT_ALLOWED && e.status === 403,
    );
  });

  test("a cancelled run refuses every later call", async () => {
    const tg = client("cancel");
    const before = await tg.runs.status();
    assert.deepEqual([before.runId, before.cancelRequested], [tg.runId, false]);
    assert.equal(typeof before.budgets.calls.used, "number");
    assert.deepEqual(before.openIntents, []);
    const c = await tg.runs.cancel({ reason: "operator said stop" });
    assert.deepEqual([c.runId, c.newlyCancelled], [tg.runId, true]);
    const st = await tg.runs.status();
    assert.deepEqual([st.cancelRequested, st.cancelReason], [true, "operator said stop"]);
    const v = await tg.authorize({ tool: "lookup", arguments: { q: "x" } });
    assert.deepEqual([v.verdict, v.reason], ["deny", "run_cancelled"]);
    let ran = false;
    await assert.rejects(
      tg.guard("lookup", { q: "x" }, () => {
        ran = true;
      }),
      (e) =>
        e instanceof RunCancelled &&
        e instanceof Denied &&
        e.code === ErrorCode.POLICY_DENIED &&
        e.reason === "run_cancelled",
    );
    assert.equal(ran, false);
    await assert.rejects(
      tg.workspace.write("a.txt", "x"),
      (e) =>
        e instanceof RunCancelled && e.status === 403 && e.reason === "run_cancelled" && e.code === "policy_denied",
    );
    assert.equal((await tg.runs.cancel()).newlyCancelled, false);
  });

  test("bad input is refused with the sidecar's code", async () => {
    const bad = new Toolgate({ url: sidecar.url, runId: "Not A Run Id!" });
    await assert.rejects(
      bad.authorize({ tool: "lookup", arguments: {} }),
      (e) => e instanceof InvalidRequest && e.code === ErrorCode.INVALID_RUN_ID && e.status === 400,
    );
    const tg = client("bad-input");
    await assert.rejects(
      tg.approvals.get("no-such-approval"),
      (e) => e instanceof NotFound && e.code === ErrorCode.NOT_FOUND && e.status === 404,
    );
    await assert.rejects(tg.intents.complete("no-such-intent", "completed"), NotFound);
    await assert.rejects(
      tg.workspace.read("a//b"),
      (e) => e instanceof WorkspaceError && e.code === ErrorCode.WORKSPACE_INVALID_PATH && e.status === 400,
    );
    await assert.rejects(tg.workspace.read("missing.txt"), (e) => e.code === "workspace_not_found" && e.status === 404);
    await assert.rejects(tg.authorize({ tool: "lookup", arguments: ["not", "an", "object"] }), TypeError);
  });

  test("workspace round trip, and trace context accepted", async () => {
    const tg = client("workspace", {
      traceContext: () => ({ traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" }),
    });
    const w = await tg.workspace.write("notes/plan.md", "# plan\n");
    assert.deepEqual([w.path, w.bytes, w.provenance], ["notes/plan.md", 7, "INTERNAL_TOOL"]);
    const r = await tg.workspace.read("notes/plan.md");
    assert.deepEqual([r.content, r.path, r.provenance], ["# plan\n", "notes/plan.md", "INTERNAL_TOOL"]);
    const root = await tg.workspace.list();
    assert.deepEqual([root.entries.map((e) => [e.name, e.kind]), root.truncated], [[["notes", "dir"]], false]);
    assert.deepEqual(
      (await tg.workspace.list("notes")).entries.map((e) => e.name),
      ["plan.md"],
    );
    const st = await tg.workspace.stat("notes/plan.md");
    assert.deepEqual([st.kind, st.size], ["file", 7]);
  });
});
