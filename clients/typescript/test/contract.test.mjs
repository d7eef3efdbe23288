// The client against the agent API's OpenAPI document
// (docs/agent-api.openapi.json, generated from the sidecar's Rust types):
// it knows every error code the document lists and no other, and reads
// every member of each answer it parses and none the document lacks.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import path from "node:path";
import { test } from "node:test";

import { ANSWER_MEMBERS, ErrorCode, ROW_MEMBERS, ToolgateError, errorClass } from "@toolgate/client";

import { ROOT } from "./sidecar.mjs";

const DOC = JSON.parse(readFileSync(path.join(ROOT, "docs", "agent-api.openapi.json"), "utf8"));
const SCHEMAS = DOC.components.schemas;
// Reported by the client itself, never sent by the sidecar.
const CLIENT_ONLY = new Set([ErrorCode.SIDECAR_UNREACHABLE, ErrorCode.BAD_RESPONSE]);
// Answered as the verdict they carry (Denied, ApprovalRequired), not by errorClass.
const VERDICT_CODES = new Set([ErrorCode.POLICY_DENIED, ErrorCode.APPROVAL_REQUIRED]);

test("ErrorCode is the document's ErrorCode enum, plus the client's own two", () => {
  const documented = SCHEMAS.ErrorCode.enum;
  assert.ok(documented.length > 30 && documented.includes("body_too_large"));
  const known = Object.values(ErrorCode).filter((c) => !CLIENT_ONLY.has(c));
  assert.deepEqual([...known].sort(), [...documented].sort());
  const unmapped = documented.filter((c) => !VERDICT_CODES.has(c) && errorClass(c) === ToolgateError);
  assert.deepEqual(unmapped, [], "codes mapped to no specific error class");
});

test("each answer the client parses has exactly the document's members", () => {
  for (const [schema, members] of Object.entries(ANSWER_MEMBERS)) {
    assert.ok(SCHEMAS[schema], `${schema} is in the document`);
    assert.deepEqual(
      [...members].sort(),
      Object.keys(SCHEMAS[schema].properties).sort(),
      `${schema}: the client's members against the document's`,
    );
  }
  // What the parser requires, the sidecar always writes.
  const required = new Set(SCHEMAS.AuthorizeResponse.required);
  for (const member of ["decision_id", "verdict", "reason", "policy_version", "risk", "intent_required"]) {
    assert.ok(required.has(member), member);
  }
  const decisions = SCHEMAS.Decision.oneOf.map((v) => v.const).sort();
  assert.deepEqual(decisions, ["allow", "deny", "escalate"]);
});

test("the rows the client reads in part have every member it reads", () => {
  for (const [schema, members] of Object.entries(ROW_MEMBERS)) {
    const documented = new Set(Object.keys(SCHEMAS[schema].properties));
    assert.deepEqual(
      members.filter((m) => !documented.has(m)),
      [],
      `${schema}: members the client reads that the sidecar does not write`,
    );
  }
});
