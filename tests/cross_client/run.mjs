// Runs tests/cross_client/scenario.json through the built TypeScript client
// (clients/typescript/dist) and prints one normalized JSON row per step.
// Usage: TOOLGATE_URL=... TOOLGATE_BIN=... TOOLGATE_DATABASE=... node run.mjs SCENARIO RUN_ID
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { ApprovalRequired, Toolgate, ToolgateError } from "../../clients/typescript/dist/index.js";

const [scenarioPath, runId] = process.argv.slice(2);
if (!scenarioPath || !runId) throw new Error("usage: node run.mjs SCENARIO RUN_ID");
const { steps } = JSON.parse(readFileSync(scenarioPath, "utf8"));
const tg = new Toolgate({ runId });

const row = (step, verdict = null, reason = null, errorCode = null, ran = false) => ({
  step,
  verdict,
  reason,
  error_code: errorCode,
  ran,
});

// A refused call: the refusing verdict when there is one, else only the code.
function refusalRow(step, err) {
  const v = err.verdict;
  return v ? row(step, v.verdict, v.reason, err.code) : row(step, null, null, err.code);
}

function batchRow(step, batch) {
  const at = batch.callIndex === undefined || batch.callIndex === null ? "" : `@${batch.callIndex}`;
  const verdicts = batch.verdicts.map((v) => v.verdict).join(",");
  return row(step, verdicts, `${batch.reason}${at};${batch.verdicts.map((v) => v.reason).join(",")}`);
}

// Grants the approval as an operator would: the real CLI on the database.
function approve(approvalId) {
  execFileSync(
    process.env.TOOLGATE_BIN,
    [
      "approvals",
      "approve",
      approvalId,
      "--database",
      process.env.TOOLGATE_DATABASE,
      "--by",
      "alice",
      "--reason",
      "cross-client",
    ],
    { stdio: ["ignore", "ignore", "inherit"] },
  );
}

const approvals = {};
for (const s of steps) {
  const name = s.step;
  if (s.op === "approve") {
    approve(approvals[s.of]);
    continue;
  }
  if (s.op === "cancel") {
    await tg.runs.cancel({ reason: s.reason });
    continue;
  }
  let out;
  if (s.op === "batch") {
    out = batchRow(name, await tg.authorizeBatch(s.calls));
  } else {
    let ran = false;
    try {
      if (s.op === "guard") {
        await tg.guard(
          s.tool,
          s.arguments,
          () => {
            ran = true;
          },
          { stepId: s.step_id },
        );
        out = row(name, "allow", null, null, ran);
      } else {
        // admit: the caller runs the call and closes its intent.
        const adm = await tg.admit(s.tool, s.arguments, { stepId: s.step_id });
        ran = true;
        if (adm.intentId) await tg.intents.complete(adm.intentId, "completed");
        out = row(name, adm.verdict.verdict, adm.verdict.reason, null, ran);
      }
    } catch (err) {
      if (!(err instanceof ToolgateError)) throw err;
      if (ran) throw new Error(`${name}: the call ran although it was refused`);
      if (err instanceof ApprovalRequired) approvals[name] = err.approvalId;
      out = refusalRow(name, err);
    }
  }
  process.stdout.write(JSON.stringify(out) + "\n");
}
