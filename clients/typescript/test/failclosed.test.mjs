// What needs no sidecar: failing closed when there is none or its answer is
// unreadable, the trace headers sent, and the error codes against the contract.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { createServer } from "node:http";
import path from "node:path";
import { after, before, describe, test } from "node:test";

import {
  ErrorCode,
  MAX_WAIT_SECONDS,
  ProtocolError,
  RUN_ID_HEADER,
  SidecarUnreachable,
  Toolgate,
  URL_ENV,
  errorClass,
} from "@toolgate/client";

import { ROOT, freePort } from "./sidecar.mjs";

const VERDICT = {
  decision_id: "d1",
  verdict: "allow",
  reason: "allow_rule",
  policy_version: "p@1",
  risk: "low",
  intent_required: false,
  args_digest: "sha256:a",
  call_digest: "sha256:c",
  matched_rule: null,
};

test("an unreachable sidecar fails closed: the guarded function never runs", async () => {
  const tg = new Toolgate({ url: `http://127.0.0.1:${await freePort()}`, timeoutMs: 2000 });
  let ran = false;
  await assert.rejects(
    tg.guard("lookup", { q: "x" }, () => {
      ran = true;
    }),
    (e) => e instanceof SidecarUnreachable && e.code === ErrorCode.SIDECAR_UNREACHABLE && e.status === undefined,
  );
  assert.equal(ran, false);
  await assert.rejects(tg.runs.status(), SidecarUnreachable);
});

describe("a sidecar answering what it should not", () => {
  // A stand-in HTTP server: no real sidecar sends these answers.
  let server;
  let url;
  let answer;
  const seen = [];
  before(async () => {
    server = createServer((req, res) => {
      let body = "";
      req.on("data", (c) => {
        body += c;
      });
      req.on("end", () => {
        seen.push({ url: req.url, headers: req.headers, body });
        const [status, text, type] = answer;
        res.writeHead(status, { "content-type": type ?? "application/json" });
        res.end(text);
      });
    });
    await new Promise((r) => server.listen(0, "127.0.0.1", r));
    url = `http://127.0.0.1:${server.address().port}`;
  });
  after(() => new Promise((r) => server.close(r)));

  const malformed = [
    ["not JSON", [200, "<html>ok</html>", "text/html"]],
    ["a verdict lacking fields", [200, JSON.stringify({ verdict: "allow" })]],
    ["a verdict outside allow/deny/escalate", [200, JSON.stringify({ ...VERDICT, verdict: "ALLOW" })]],
    ["intent_required not a boolean", [200, JSON.stringify({ ...VERDICT, intent_required: "no" })]],
    ["an array", [200, "[]"]],
    ["an error without its envelope", [500, JSON.stringify({ oops: true })]],
    ["a redirect", [302, "{}"]],
  ];
  for (const [what, reply] of malformed) {
    test(`${what}: throws, the guarded function never runs`, async () => {
      answer = reply;
      const tg = new Toolgate({ url });
      let ran = false;
      await assert.rejects(
        tg.guard("lookup", { q: "x" }, () => {
          ran = true;
        }),
        (e) => (e instanceof ProtocolError && e.code === ErrorCode.BAD_RESPONSE) || e instanceof SidecarUnreachable,
      );
      assert.equal(ran, false);
    });
  }

  test("an error envelope becomes its class with code and status", async () => {
    answer = [503, JSON.stringify({ error: { code: "store_unavailable", message: "db down" } })];
    const tg = new Toolgate({ url });
    await assert.rejects(
      tg.guard("lookup", {}, () => assert.fail("ran")),
      (e) =>
        e instanceof errorClass("store_unavailable") &&
        e.code === "store_unavailable" &&
        e.status === 503 &&
        e.message === "db down",
    );
  });

  test("W3C trace context is passed on when given, and only then", async () => {
    answer = [200, JSON.stringify(VERDICT)];
    const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    const fromProvider = new Toolgate({ url, traceContext: () => ({ traceparent, tracestate: "vendor=1" }) });
    seen.length = 0;
    await fromProvider.authorize({ tool: "lookup", arguments: {} });
    assert.equal(seen[0].headers.traceparent, traceparent);
    assert.equal(seen[0].headers.tracestate, "vendor=1");
    const other = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    await fromProvider.authorize({ tool: "lookup", arguments: {}, trace: { traceparent: other } });
    assert.equal(seen[1].headers.traceparent, other);
    assert.equal(seen[1].headers.tracestate, undefined);
    const plain = new Toolgate({ url });
    await plain.authorize({ tool: "lookup", arguments: {} });
    assert.equal(seen[2].headers.traceparent, undefined);
    // The request itself: snake_case body, the client's run id.
    assert.deepEqual(JSON.parse(seen[2].body), { tool: "lookup", arguments: {}, run_id: plain.runId });
    assert.equal(seen[2].headers["content-type"], "application/json");
  });
});

test("the client knows every error code and limit of the contract (docs/sidecar.md)", () => {
  const doc = readFileSync(path.join(ROOT, "docs", "sidecar.md"), "utf8");
  const between = (a, b) => doc.split(a)[1].split(b)[0];
  const codes = [
    ...between("<!-- error-codes:begin -->", "<!-- error-codes:end -->").matchAll(/^\| (\d{3}) \| `([a-z_]+)` \|/gm),
  ].map((m) => m[2]);
  assert.ok(codes.length > 30, "the generated table was found");
  const known = new Set(Object.values(ErrorCode));
  assert.deepEqual(
    codes.filter((c) => !known.has(c)),
    [],
  );
  const limits = between("<!-- agent-api-limits:begin -->", "<!-- agent-api-limits:end -->");
  const value = (name) => limits.match(new RegExp(`\`${name}\` \\| \`([^\`]+)\``))[1];
  assert.equal(String(MAX_WAIT_SECONDS), value("agent_api::MAX_WAIT_SECONDS"));
  assert.equal(RUN_ID_HEADER, value("agent_api::RUN_ID_HEADER"));
  assert.equal(URL_ENV, value("env::URL"));
});
