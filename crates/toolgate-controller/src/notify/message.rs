//! What one notification says and how each format carries it: Standard
//! Webhooks JSON (signed: `webhook-id`, `webhook-timestamp`,
//! `webhook-signature`), a Slack incoming-webhook message, or a CloudEvent
//! in structured mode. Pure: no I/O, the clock passed in.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;
use toolgate_policy::NotifyFormat;

/// An approval event as people are told about it.
#[derive(Debug, Clone, PartialEq)]
pub struct Notice {
    /// Stable across retries and channels: what receivers de-duplicate on.
    pub id: String,
    /// `approval.requested`, `approval.decided`, `approval.expired` or
    /// `approval.cancelled`.
    pub kind: &'static str,
    /// When the change happened (Unix seconds).
    pub occurred_at: i64,
    /// The event's data: the approval, its call and the command that
    /// decides it.
    pub data: Value,
}

/// The notice kind of a store event kind (`None`: not one people hear of).
pub fn kind_of(event_kind: &str) -> Option<&'static str> {
    Some(match event_kind {
        "approval.requested" => "approval.requested",
        "approval.resolved" => "approval.decided",
        "approval.expired" => "approval.expired",
        "approval.cancelled" => "approval.cancelled",
        _ => return None,
    })
}

/// One HTTP POST: its body and headers.
#[derive(Debug, Clone, PartialEq)]
pub struct Outgoing {
    /// The request body.
    pub body: Vec<u8>,
    /// Headers, `content-type` included.
    pub headers: Vec<(&'static str, String)>,
}

/// A signing secret as the Standard Webhooks libraries write it
/// (`whsec_` + base64), as bytes; a bare base64 value is taken too.
pub fn decode_secret(text: &str) -> Result<Vec<u8>, String> {
    let text = text.trim();
    let b64 = text.strip_prefix("whsec_").unwrap_or(text);
    match B64.decode(b64) {
        Ok(bytes) if bytes.len() >= 16 => Ok(bytes),
        Ok(_) => Err("the signing secret is shorter than 16 bytes".into()),
        Err(e) => Err(format!("the signing secret is not base64 (`whsec_…`): {e}")),
    }
}

/// `v1,` and the base64 HMAC-SHA256 of `{id}.{timestamp}.{body}`: the
/// Standard Webhooks signature.
pub fn sign(secret: &[u8], id: &str, timestamp: i64, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key length");
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("v1,{}", B64.encode(mac.finalize().into_bytes()))
}

/// The message for a channel of `format`, sent at `now` (Unix seconds),
/// signed with `secret` where there is one.
pub fn render(notice: &Notice, format: NotifyFormat, secret: Option<&[u8]>, now: i64) -> Outgoing {
    let (body, content_type) = match format {
        NotifyFormat::Standard => (
            json!({"type": notice.kind, "timestamp": rfc3339(notice.occurred_at), "data": notice.data}),
            "application/json",
        ),
        NotifyFormat::Slack => (slack(notice), "application/json"),
        NotifyFormat::Cloudevents => (
            json!({
                "specversion": "1.0",
                "id": notice.id,
                "source": format!("toolgate/{}", notice.data["namespace"].as_str().unwrap_or("")),
                "type": format!("dev.toolgate.{}", notice.kind),
                "subject": notice.data["approval_id"],
                "time": rfc3339(notice.occurred_at),
                "datacontenttype": "application/json",
                "data": notice.data,
            }),
            "application/cloudevents+json",
        ),
    };
    let body = serde_json::to_vec(&body).unwrap_or_default();
    let mut headers = vec![("content-type", content_type.to_owned())];
    if let Some(secret) = secret.filter(|_| format != NotifyFormat::Slack) {
        headers.push(("webhook-id", notice.id.clone()));
        headers.push(("webhook-timestamp", now.to_string()));
        headers.push(("webhook-signature", sign(secret, &notice.id, now, &body)));
    }
    Outgoing { body, headers }
}

fn rfc3339(seconds: i64) -> String {
    jiff::Timestamp::from_second(seconds)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

/// A Slack message: what is asked, by whom, under which policy, until
/// when, and the command that decides it. Every value that comes from an
/// agent, a tenant or an approver (tool, action, preview, requester, run,
/// policy version, decider) is one line in a code span that cannot be
/// closed early, with Slack's three control characters escaped: it neither
/// formats, nor mentions anyone, nor links. The header and the fallback
/// text hold no such value.
fn slack(notice: &Notice) -> Value {
    let d = &notice.data;
    // Each value cut so the message stays within Slack's limits (a refused
    // message would be retried for nothing).
    let code = |k: &str| {
        let max = if k == "preview" { 500 } else { 200 };
        code_span(d[k].as_str().unwrap_or_default(), max)
    };
    let title = match notice.kind {
        "approval.requested" => "An agent asks for approval",
        "approval.decided" => match d["decision"].as_str() {
            Some("approved") => "Approval approved",
            Some("denied") => "Approval denied",
            _ => "Approval decided",
        },
        "approval.expired" => "Approval expired unanswered",
        _ => "Approval cancelled",
    };
    let mut fields = format!("*Tool:* {}", code("tool"));
    if d["action"].as_str().is_some_and(|a| !a.is_empty()) {
        fields.push_str(&format!(" *Action:* {}", code("action")));
    }
    fields.push_str(&format!(
        "\n*Call:* {}\n*Requested by:* {} (run {})\n*Policy:* {}\n*Expires:* {}",
        code("preview"),
        code("requested_by"),
        code("run_id"),
        code("policy_version"),
        code("expires_at"),
    ));
    if notice.kind == "approval.decided" {
        fields.push_str(&format!("\n*Decided by:* {}", code("decided_by")));
    }
    let mut blocks = vec![
        json!({"type": "header", "text": {"type": "plain_text", "text": title}}),
        json!({"type": "section", "text": {"type": "mrkdwn", "text": fields}}),
    ];
    if let Some(why) = why(&d["escalation"]) {
        blocks.push(json!({"type": "section", "text": {"type": "mrkdwn", "text": why}}));
    }
    if notice.kind == "approval.requested" {
        blocks.push(json!({"type": "section", "text": {"type": "mrkdwn",
            "text": code("approve_command")}}));
    }
    json!({"text": title, "blocks": blocks})
}

/// Most flow labels a Slack message names (the Approval carries them all).
const SLACK_LABELS: usize = 5;

/// Why the call was escalated, for Slack: the reason code and matched rule,
/// and each flow label the rule required with the call that set it, every
/// value in a code span (the escalation's keys as the Approval spells them).
fn why(escalation: &Value) -> Option<String> {
    let reason = escalation["reason"].as_str()?;
    let mut text = format!("*Why:* {}", code_span(reason, 64));
    if let Some(rule) = escalation["matchedRule"].as_str() {
        text.push_str(&format!(" *Rule:* {}", code_span(rule, 200)));
    }
    let labels = escalation["flowLabels"]
        .as_array()
        .map_or(&[][..], Vec::as_slice);
    for l in labels.iter().take(SLACK_LABELS) {
        text.push_str(&format!(
            "\n*Flow label:* {} set by {} at {}",
            code_span(l["label"].as_str().unwrap_or_default(), 63),
            code_span(l["tool"].as_str().unwrap_or_default(), 100),
            code_span(l["setAt"].as_str().unwrap_or_default(), 40),
        ));
    }
    if labels.len() > SLACK_LABELS {
        text.push_str(&format!("\n… and {} more", labels.len() - SLACK_LABELS));
    }
    Some(text)
}

/// `text` as an inline code span: on one line (control characters and
/// line separators become spaces), at most `max` characters, `&`, `<` and
/// `>` escaped, and every backtick replaced by `ʹ` so the span cannot be
/// closed from inside. An empty value shows as `-`.
fn code_span(text: &str, max: usize) -> String {
    let line: String = text
        .chars()
        .map(|c| match c {
            c if c.is_control() || matches!(c, '\u{2028}' | '\u{2029}') => ' ',
            '`' => '\u{2b9}',
            c => c,
        })
        .take(max)
        .collect();
    let line = line.trim();
    let line = if line.is_empty() { "-" } else { line };
    format!(
        "`{}`",
        line.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn notice() -> Notice {
        Notice {
            id: "toolgate-42".into(),
            kind: "approval.requested",
            occurred_at: 1_764_900_000,
            data: json!({"approval_id": "a1", "namespace": "agents", "tool": "bash",
                         "preview": "<!channel> `rm -rf` <https://evil|click>", "requested_by": "sidecar:agents/p",
                         "run_id": "r1", "policy_version": "p@1", "expires_at": "2026-12-05T12:00:00Z",
                         "approve_command": "kubectl toolgate approve apr-a1 -n toolgate-system"}),
        }
    }

    /// The Standard Webhooks specification's own example: a receiver using
    /// any of the published libraries computes the same signature.
    #[test]
    fn signs_as_the_standard_webhooks_specification_says() {
        let secret = decode_secret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        assert_eq!(
            sign(
                &secret,
                "msg_p5jXN8AQM9LWM0D4loKWxJek",
                1_614_265_330,
                br#"{"test": 2432232314}"#
            ),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
        assert!(decode_secret("whsec_!!!").is_err());
        assert!(
            decode_secret("whsec_c2hvcnQ=").is_err(),
            "5 bytes is no secret"
        );
    }

    #[test]
    fn each_format_carries_the_notice() {
        let secret = b"0123456789abcdef0123";
        let standard = render(
            &notice(),
            NotifyFormat::Standard,
            Some(secret),
            1_764_900_005,
        );
        let body: Value = serde_json::from_slice(&standard.body).unwrap();
        assert_eq!(body["type"], "approval.requested");
        assert_eq!(body["data"]["approval_id"], "a1");
        let header = |o: &Outgoing, k: &str| {
            o.headers
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.clone())
        };
        assert_eq!(
            header(&standard, "webhook-id").as_deref(),
            Some("toolgate-42")
        );
        assert_eq!(
            header(&standard, "webhook-signature").unwrap(),
            sign(secret, "toolgate-42", 1_764_900_005, &standard.body)
        );
        let ce = render(&notice(), NotifyFormat::Cloudevents, None, 1);
        assert_eq!(
            header(&ce, "content-type").as_deref(),
            Some("application/cloudevents+json")
        );
        assert!(
            header(&ce, "webhook-signature").is_none(),
            "unsigned without a secret"
        );
        let ce: Value = serde_json::from_slice(&ce.body).unwrap();
        assert_eq!(
            (ce["specversion"].as_str(), ce["type"].as_str()),
            (Some("1.0"), Some("dev.toolgate.approval.requested"))
        );
        assert_eq!(ce["source"], "toolgate/agents");
        let slack = render(&notice(), NotifyFormat::Slack, Some(secret), 1);
        let text = String::from_utf8(slack.body.clone()).unwrap();
        assert!(
            header(&slack, "webhook-signature").is_none(),
            "Slack takes no signature"
        );
        // The agent's preview can neither ping a channel nor forge a link.
        assert!(
            !text.contains("<!channel>") && !text.contains("<https://evil"),
            "{text}"
        );
        assert!(text.contains("&lt;!channel&gt;"), "{text}");
        assert!(text.contains("kubectl toolgate approve apr-a1"), "{text}");
        // A huge, multi-line preview stays one bounded line.
        let mut big = notice();
        big.data["preview"] = json!(format!("line1\n*forged line*{}", "<".repeat(5000)));
        let body: Value =
            serde_json::from_slice(&render(&big, NotifyFormat::Slack, None, 1).body).unwrap();
        let section = body["blocks"][1]["text"]["text"].as_str().unwrap();
        assert!(section.chars().count() < 3000, "{}", section.len());
        assert!(!section.contains("line1\n"), "{section}");
    }

    /// Every agent- or tenant-supplied value arrives inert in Slack: each
    /// inside its own code span (the text outside the spans is the
    /// template's alone), on one line, with nothing Slack parses as a
    /// mention, a link or formatting.
    #[test]
    fn hostile_values_arrive_inert_in_slack() {
        let hostile =
            "<!channel> <https://evil|click> *bold* _it_ ~s~ `code` ``` \n\r\u{2028}next & <@U123>";
        for kind in ["approval.requested", "approval.decided"] {
            let mut n = notice();
            n.kind = kind;
            for k in [
                "tool",
                "action",
                "preview",
                "requested_by",
                "run_id",
                "policy_version",
                "decided_by",
            ] {
                n.data[k] = json!(hostile);
            }
            n.data["decision"] = json!("<!here> approved");
            let body: Value =
                serde_json::from_slice(&render(&n, NotifyFormat::Slack, None, 1).body).unwrap();
            let text = body.to_string();
            for bad in ["<!", "<http", "<@", "|click>"] {
                assert!(!text.contains(bad), "{kind}: {bad} in {text}");
            }
            assert_eq!(
                body["text"], body["blocks"][0]["text"]["text"],
                "the fallback is the fixed header"
            );
            assert!(!body["text"].as_str().unwrap().contains('!'), "{body}");
            let section = body["blocks"][1]["text"]["text"].as_str().unwrap();
            let parts: Vec<&str> = section.split('`').collect();
            let outside: String = parts.iter().step_by(2).copied().collect();
            let decided = if kind == "approval.decided" {
                "\n*Decided by:* "
            } else {
                ""
            };
            assert_eq!(
                outside,
                format!(
                    "*Tool:*  *Action:* \n*Call:* \n*Requested by:*  (run )\n*Policy:* \n*Expires:* {decided}"
                ),
                "{section}"
            );
            let inert = "&lt;!channel&gt; &lt;https://evil|click&gt; *bold* _it_ ~s~ \u{2b9}code\u{2b9} \u{2b9}\u{2b9}\u{2b9}    next &amp; &lt;@U123&gt;";
            let spans: Vec<&str> = parts.iter().skip(1).step_by(2).copied().collect();
            let expected = if kind == "approval.decided" { 8 } else { 7 };
            assert_eq!(spans.len(), expected, "{section}");
            for (i, span) in spans.iter().enumerate() {
                // The expiry is the controller's own text.
                if i != 6 {
                    assert_eq!(*span, inert, "{section}");
                }
            }
        }
        // An empty value is a dash, not an empty span.
        assert_eq!(code_span("", 10), "`-`");
        assert_eq!(code_span("```", 10), "`\u{2b9}\u{2b9}\u{2b9}`");
        assert_eq!(code_span("abcdef", 3), "`abc`");
    }

    fn with_escalation() -> Notice {
        let mut n = notice();
        n.data["escalation"] = json!({
            "decisionId": "d1", "reason": "flow_escalate",
            "matchedRule": "flow:no-exfil when private+untrusted",
            "flowLabels": [
                {"label": "private", "decisionId": "d0", "tool": "read_file", "setAt": "2026-12-05T11:59:00Z"},
                {"label": "untrusted", "decisionId": "d9", "tool": "<!here> fetch", "setAt": "2026-12-05T11:59:30Z"}
            ],
            "history": [{"at": "2026-12-05T11:59:00Z", "tool": "read_file", "verdict": "allow", "reason": "allow_rule"}]
        });
        n
    }

    /// Every format says why the call was escalated: the reason, the rule,
    /// the policy version, and the flow labels with the calls that set them.
    #[test]
    fn every_format_carries_the_why() {
        let n = with_escalation();
        for format in [NotifyFormat::Standard, NotifyFormat::Cloudevents] {
            let body: Value = serde_json::from_slice(&render(&n, format, None, 1).body).unwrap();
            let why = &body["data"]["escalation"];
            assert_eq!(why["reason"], "flow_escalate", "{format:?}");
            assert_eq!(why["matchedRule"], "flow:no-exfil when private+untrusted");
            assert_eq!(why["flowLabels"][1]["tool"], "<!here> fetch");
            assert_eq!(body["data"]["policy_version"], "p@1");
        }
        let body: Value =
            serde_json::from_slice(&render(&n, NotifyFormat::Slack, None, 1).body).unwrap();
        let why = body["blocks"][2]["text"]["text"].as_str().unwrap();
        assert_eq!(
            why,
            "*Why:* `flow_escalate` *Rule:* `flow:no-exfil when private+untrusted`\n\
             *Flow label:* `private` set by `read_file` at `2026-12-05T11:59:00Z`\n\
             *Flow label:* `untrusted` set by `&lt;!here&gt; fetch` at `2026-12-05T11:59:30Z`"
        );
        assert!(body.to_string().contains("*Policy:* `p@1`"), "{body}");
        // The command stays the last block; without a why there is no block.
        assert!(
            body["blocks"][3]["text"]["text"]
                .as_str()
                .unwrap()
                .contains("kubectl toolgate approve")
        );
        let plain: Value =
            serde_json::from_slice(&render(&notice(), NotifyFormat::Slack, None, 1).body).unwrap();
        assert_eq!(plain["blocks"].as_array().unwrap().len(), 3);
        // Many labels: a bounded message.
        let mut many = with_escalation();
        many.data["escalation"]["flowLabels"] = json!((0..40).map(|i| json!({"label": format!("l{i}"), "decisionId": "d", "tool": "t".repeat(5000), "setAt": "x"})).collect::<Vec<_>>());
        let body: Value =
            serde_json::from_slice(&render(&many, NotifyFormat::Slack, None, 1).body).unwrap();
        let why = body["blocks"][2]["text"]["text"].as_str().unwrap();
        assert!(
            why.chars().count() < 3000 && why.ends_with("… and 35 more"),
            "{why}"
        );
    }

    #[test]
    fn store_events_map_to_notice_kinds() {
        assert_eq!(kind_of("approval.resolved"), Some("approval.decided"));
        assert_eq!(kind_of("run.cancelled"), None);
    }
}
