//! The console's pages, built with `maud`, which escapes every interpolated
//! string: a preview holding `<script>` is shown as those characters. Every
//! text a page shows goes through [`visible`] as well, so characters that
//! change how text reads without showing themselves are written out. No
//! inline script or style (the Content-Security-Policy forbids them) and no
//! third-party asset.

use jiff::Timestamp;
use maud::{DOCTYPE, Markup, html};
use toolgate_k8s::crd::{Approval, Escalation};

use crate::cluster::pending;
use crate::identity::Identity;

/// How many decided approvals the page lists.
const RECENT: usize = 20;

fn layout(title: &str, who: Option<&Identity>, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · toolgate" }
                link rel="stylesheet" href="/static/console.css";
                script src="/static/console.js" defer {}
            }
            body {
                header {
                    h1 { "toolgate approvals" }
                    @if let Some(who) = who {
                        p.who {
                            "Signed in as " strong #who { (visible(&who.user)) }
                            @if !who.groups.is_empty() { " (" (visible(&who.groups.join(", "))) ")" }
                        }
                    }
                }
                main { (body) }
            }
        }
    }
}

/// The sign-in form (token sign-in only).
pub fn login(message: Option<&str>) -> Markup {
    layout(
        "Sign in",
        None,
        html! {
            @if let Some(m) = message { p.error role="alert" { (visible(m)) } }
            form method="post" action="/login" {
                label for="token" { "Kubernetes token" }
                textarea #token name="token" rows="4" autocomplete="off" required {}
                p.hint { "From " code { "kubectl create token NAME" } " or your identity provider; it is checked by a TokenReview and not stored." }
                button type="submit" #sign-in { "Sign in" }
            }
        },
    )
}

/// Whether `c` changes how the text around it reads without showing
/// itself: bidirectional marks, embeddings, overrides and isolates,
/// zero-width and invisible characters, line and paragraph separators, tag
/// characters, and control characters other than a newline or a tab.
pub fn hidden(c: char) -> bool {
    matches!(c,
        '\u{0000}'..='\u{0008}' | '\u{000B}'..='\u{001F}' | '\u{007F}'..='\u{009F}'
        | '\u{00AD}' | '\u{034F}' | '\u{061C}' | '\u{115F}' | '\u{1160}' | '\u{17B4}'
        | '\u{17B5}' | '\u{180B}'..='\u{180F}' | '\u{200B}'..='\u{200F}'
        | '\u{2028}'..='\u{202E}' | '\u{205F}'..='\u{206F}' | '\u{3164}' | '\u{FE00}'..='\u{FE0F}'
        | '\u{FEFF}' | '\u{FFA0}' | '\u{FFF0}'..='\u{FFFB}' | '\u{1D173}'..='\u{1D17A}'
        | '\u{E0000}'..='\u{E0FFF}')
}

/// `text` as a page shows it: every [`hidden`] character written out
/// (`<U+202E>`), so an agent cannot make a command read as another. The
/// one function every shown text goes through (`maud` then escapes it).
pub fn visible(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if hidden(c) {
            out.push_str(&format!("<U+{:04X}>", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    out
}

fn time_left(expires: Option<&str>, now: Timestamp) -> String {
    let Some(at) = expires.and_then(|e| e.parse::<Timestamp>().ok()) else {
        return "-".into();
    };
    let secs = (at - now).get_seconds();
    if secs <= 0 {
        "expired".into()
    } else if secs < 120 {
        format!("{secs} s")
    } else {
        format!("{} min", secs / 60)
    }
}

/// How many of the run's earlier decisions a card lists.
const HISTORY: usize = 5;

/// Why a call was escalated, inside a card's `dl`: the reason and rule of
/// the escalating decision, the flow labels it required with the calls
/// that set them, and the run's last decisions (masked by the controller).
fn escalation(why: &Escalation) -> Markup {
    let history = &why.history[why.history.len().saturating_sub(HISTORY)..];
    html! {
        dt { "Why" }
        dd.why {
            code.reason { (visible(&why.reason)) }
            @if let Some(rule) = &why.matched_rule { " · " code.rule { (visible(rule)) } }
        }
        @if !why.flow_labels.is_empty() {
            dt { "Flow labels" }
            dd.labels { ul {
                @for l in &why.flow_labels {
                    li {
                        code { (visible(&l.label)) } " set by "
                        code { (visible(l.tool.as_deref().unwrap_or("?"))) } " at "
                        (visible(&l.set_at))
                    }
                }
            } }
        }
        @if !history.is_empty() {
            dt { "Run history" }
            dd.history { ol {
                @for d in history {
                    li {
                        (visible(&d.at)) " " code { (visible(&d.tool)) } " "
                        span.verdict { (visible(&d.verdict)) } " (" (visible(&d.reason))
                        @if let Some(rule) = &d.matched_rule { ", " code { (visible(rule)) } }
                        ")"
                    }
                }
            } }
        }
    }
}

/// The approvals table: what `/` shows and `/fragment` refreshes.
pub fn approvals(items: &[Approval], csrf: &str, now: Timestamp) -> Markup {
    // Oldest first: a new approval is added below the ones on screen, so
    // an arrival never moves a button under the approver's cursor.
    let mut waiting: Vec<&Approval> = items.iter().filter(|a| pending(a)).collect();
    waiting.reverse();
    let decided: Vec<&Approval> = items
        .iter()
        .filter(|a| a.spec.request.is_some() && !pending(a))
        .take(RECENT)
        .collect();
    html! {
        section #pending {
            h2 { "Waiting (" (waiting.len()) ")" }
            @if waiting.is_empty() { p.empty { "Nothing waits for a decision." } }
            @for a in &waiting {
                @let name = a.metadata.name.as_deref().unwrap_or_default();
                @let namespace = a.metadata.namespace.as_deref().unwrap_or_default();
                @let r = a.spec.request.as_ref().expect("pending approvals have a request");
                @let status = a.status.as_ref();
                // Keyed by namespace and name: the same name may wait in two namespaces.
                article.approval data-namespace=(namespace) data-name=(name) {
                    h3 { code.tool { (visible(&r.tool)) } " · " span.tenant { (visible(&r.tenant)) } }
                    pre.preview { (visible(r.preview.as_deref().unwrap_or("(no preview)"))) }
                    dl {
                        dt { "Namespace" } dd.namespace { code { (visible(namespace)) } }
                        dt { "Run" } dd { code { (visible(&r.run_id)) } }
                        dt { "Requested by" } dd { (visible(r.requested_by.as_deref().unwrap_or("-"))) }
                        dt { "Policy" } dd { code { (visible(&r.policy_version)) } }
                        @if let Some(why) = &r.escalation { (escalation(why)) }
                        dt { "Time left" } dd.left { (time_left(status.and_then(|s| s.expires_at.as_deref()), now)) }
                        @if let Some(m) = status.and_then(|s| s.message.as_deref()) {
                            dt { "Note" } dd.note { (visible(m)) }
                        }
                    }
                    form method="post" action={ "/approvals/" (namespace) "/" (name) } {
                        input type="hidden" name="csrf" value=(csrf);
                        label { "Reason " input type="text" name="reason" maxlength="512"; }
                        button type="submit" name="decision" value="approved" .approve { "Approve" }
                        button type="submit" name="decision" value="denied" .deny { "Deny" }
                    }
                }
            }
        }
        section #recent {
            h2 { "Recent decisions" }
            table {
                thead { tr { th { "Tool" } th { "Tenant" } th { "Namespace" } th { "Outcome" } th { "By" } th { "Reason" } th { "Note" } } }
                tbody {
                    @for a in &decided {
                        @let r = a.spec.request.as_ref().expect("filtered on requests");
                        tr {
                            td { code { (visible(&r.tool)) } }
                            td { (visible(&r.tenant)) }
                            td.namespace { (visible(a.metadata.namespace.as_deref().unwrap_or_default())) }
                            td.outcome { (a.status.as_ref().and_then(|s| s.phase).map_or("-".to_owned(), |p| format!("{p:?}"))) }
                            td { (visible(a.spec.decided_by.as_deref().unwrap_or("-"))) }
                            td { (visible(a.spec.reason.as_deref().unwrap_or(""))) }
                            // Why a decision was not recorded (not an approver, …).
                            td.note { (visible(a.status.as_ref().and_then(|s| s.message.as_deref()).unwrap_or(""))) }
                        }
                    }
                }
            }
        }
    }
}

/// The main page.
pub fn index(who: &Identity, table: Markup, notice: Option<&str>) -> Markup {
    layout(
        "Approvals",
        Some(who),
        html! {
            @if let Some(n) = notice { p.notice role="status" { (visible(n)) } }
            div #approvals { (table) }
            @if !who.user.is_empty() {
                form method="post" action="/logout" { button type="submit" .link { "Sign out" } }
            }
        },
    )
}

/// A refusal, in words.
pub fn error(who: Option<&Identity>, code: &str, message: &str) -> Markup {
    layout(
        "Refused",
        who,
        html! {
            p.error role="alert" data-code=(code) { (visible(message)) }
            p { a href="/" { "Back to the approvals" } }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolgate_k8s::crd::{ApprovalRequest, ApprovalSpec};

    #[test]
    fn agent_text_is_shown_as_text() {
        let mut a = Approval::new(
            "apr-x",
            ApprovalSpec {
                request: Some(ApprovalRequest {
                    approval_id: "x".into(),
                    tenant: "agents".into(),
                    invocation_id: "i".into(),
                    tool: "bash<img src=x onerror=alert(1)>".into(),
                    args_digest: "sha256:0".into(),
                    call_digest: None,
                    action: None,
                    preview: Some("<script>alert('owned')</script>\"'&".into()),
                    run_id: "r\"><b>".into(),
                    policy_version: "p@1".into(),
                    profile: None,
                    requested_by: Some("sidecar:<i>".into()),
                    escalation: None,
                }),
                grant: None,
                decision: None,
                reason: None,
                decided_by: None,
                decided_by_groups: None,
            },
        );
        a.metadata.name = Some("apr-x\"onmouseover=\"x".into());
        let html = approvals(&[a], "tok\"en", Timestamp::UNIX_EPOCH).into_string();
        assert!(!html.contains("<script>alert"), "{html}");
        assert!(
            html.contains("&lt;script&gt;alert('owned')&lt;/script&gt;&quot;'&amp;"),
            "{html}"
        );
        assert!(!html.contains("<img"), "{html}");
        assert!(!html.contains("<b>") && !html.contains("<i>"), "{html}");
        assert!(!html.contains("x\"onmouseover"), "{html}");
        assert!(html.contains("value=\"tok&quot;en\""), "{html}");
        assert_eq!(visible("rm -rf /\u{202E}gnp.x"), "rm -rf /<U+202E>gnp.x");
    }

    /// The why of an escalation on the card: reason, rule, flow labels with
    /// the calls that set them, and the run's last decisions, each escaped
    /// and with invisible characters written out.
    #[test]
    fn the_card_says_why() {
        use toolgate_k8s::crd::{FlowLabelCause, PastDecision};
        let past = |i: usize| PastDecision {
            at: format!("2026-12-05T11:5{i}:00Z"),
            tool: format!("tool{i}"),
            verdict: "allow".into(),
            reason: "allow_rule".into(),
            matched_rule: Some(format!("token=**** <b>{i}</b>")),
        };
        let why = Escalation {
            decision_id: "d1".into(),
            reason: "flow_escalate".into(),
            matched_rule: Some("flow:no-exfil when private\u{202E}".into()),
            flow_labels: vec![FlowLabelCause {
                label: "private".into(),
                decision_id: "d0".into(),
                tool: Some("<script>read_file".into()),
                set_at: "2026-12-05T11:59:00Z".into(),
            }],
            history: (0..7).map(past).collect(),
        };
        let mut a = Approval::new(
            "apr-w",
            ApprovalSpec {
                request: Some(ApprovalRequest {
                    approval_id: "w".into(),
                    tenant: "agents".into(),
                    invocation_id: "i".into(),
                    tool: "bash".into(),
                    args_digest: "sha256:0".into(),
                    call_digest: None,
                    action: None,
                    preview: None,
                    run_id: "r".into(),
                    policy_version: "p@1".into(),
                    profile: None,
                    requested_by: None,
                    escalation: Some(why),
                }),
                grant: None,
                decision: None,
                reason: None,
                decided_by: None,
                decided_by_groups: None,
            },
        );
        a.metadata.name = Some("apr-w".into());
        a.metadata.namespace = Some("team-a".into());
        let html = approvals(&[a], "t", Timestamp::UNIX_EPOCH).into_string();
        // Keyed, shown and decided by namespace and name.
        assert!(
            html.contains("data-namespace=\"team-a\" data-name=\"apr-w\""),
            "{html}"
        );
        assert!(
            html.contains("action=\"/approvals/team-a/apr-w\""),
            "{html}"
        );
        assert!(
            html.contains("<dd class=\"namespace\"><code>team-a</code></dd>"),
            "{html}"
        );
        assert!(
            html.contains("<code class=\"reason\">flow_escalate</code>"),
            "{html}"
        );
        assert!(
            html.contains("flow:no-exfil when private&lt;U+202E&gt;"),
            "{html}"
        );
        assert!(html.contains("<code>private</code> set by <code>&lt;script&gt;read_file</code> at 2026-12-05T11:59:00Z"), "{html}");
        assert!(html.contains("<code>p@1</code>"), "{html}");
        // The last five decisions of the run, oldest first; never markup.
        assert!(
            !html.contains("tool0") && !html.contains("tool1<"),
            "{html}"
        );
        let shown: Vec<usize> = (2..7)
            .filter(|i| html.contains(&format!("<code>tool{i}</code>")))
            .collect();
        assert_eq!(shown, vec![2, 3, 4, 5, 6], "{html}");
        assert!(html.find("tool2").unwrap() < html.find("tool6").unwrap());
        assert!(
            html.contains("token=**** &lt;b&gt;6&lt;/b&gt;") && !html.contains("<b>"),
            "{html}"
        );
    }

    const HOSTILE: &str = "a\u{202A}b\u{202B}c\u{202C}d\u{202D}e\u{202E}f\u{2066}g\u{2067}h\u{2068}\
                           i\u{2069}j\u{200B}k\u{200C}l\u{200D}m\u{200E}n\u{200F}o\u{FEFF}p\u{2028}\
                           q\u{2029}r\u{00AD}s\u{2060}t\u{061C}u\u{E0041}v\u{001B}w\u{0085}x";

    /// Every code point of `HOSTILE` written out, in order.
    fn written_out() -> String {
        visible(HOSTILE)
    }

    #[test]
    fn invisible_characters_are_written_out() {
        assert_eq!(
            written_out(),
            "a<U+202A>b<U+202B>c<U+202C>d<U+202D>e<U+202E>f<U+2066>g<U+2067>h<U+2068>\
             i<U+2069>j<U+200B>k<U+200C>l<U+200D>m<U+200E>n<U+200F>o<U+FEFF>p<U+2028>\
             q<U+2029>r<U+00AD>s<U+2060>t<U+061C>u<U+E0041>v<U+001B>w<U+0085>x"
        );
        // What reads as itself stays: newlines and tabs in a preview,
        // accents, other scripts, emoji.
        assert_eq!(visible("ls\n\tzoë ĳ ש 日本 🙂"), "ls\n\tzoë ĳ ש 日本 🙂");
    }

    #[test]
    fn every_cell_writes_invisible_characters_out() {
        let request = ApprovalRequest {
            approval_id: "x".into(),
            tenant: HOSTILE.into(),
            invocation_id: HOSTILE.into(),
            tool: HOSTILE.into(),
            args_digest: HOSTILE.into(),
            call_digest: None,
            action: Some(HOSTILE.into()),
            preview: Some(HOSTILE.into()),
            run_id: HOSTILE.into(),
            policy_version: HOSTILE.into(),
            profile: Some(HOSTILE.into()),
            requested_by: Some(HOSTILE.into()),
            escalation: None,
        };
        let status = || {
            Some(toolgate_k8s::crd::ApprovalStatus {
                message: Some(HOSTILE.into()),
                ..Default::default()
            })
        };
        let mut waiting = Approval::new(
            "apr-waiting",
            ApprovalSpec {
                request: Some(request.clone()),
                grant: None,
                decision: None,
                reason: None,
                decided_by: None,
                decided_by_groups: None,
            },
        );
        waiting.status = status();
        let mut decided = Approval::new(
            "apr-decided",
            ApprovalSpec {
                request: Some(request),
                grant: None,
                decision: Some(toolgate_k8s::crd::Decision::Denied),
                reason: Some(HOSTILE.into()),
                decided_by: Some(HOSTILE.into()),
                decided_by_groups: Some(vec![HOSTILE.into()]),
            },
        );
        decided.status = status();
        let table = approvals(&[decided, waiting], "t", Timestamp::UNIX_EPOCH);
        let who = Identity {
            user: HOSTILE.into(),
            groups: vec![HOSTILE.into()],
        };
        let pages = [
            index(&who, table, Some(HOSTILE)).into_string(),
            error(Some(&who), "forbidden", HOSTILE).into_string(),
            login(Some(HOSTILE)).into_string(),
        ];
        let escaped = written_out().replace('<', "&lt;").replace('>', "&gt;");
        for page in &pages {
            assert!(!page.chars().any(hidden), "{page}");
            assert!(page.contains(&escaped), "{page}");
        }
        // Tool, tenant, policy, note and run in the card; tool, tenant, by,
        // reason and note in the recent decisions; the preview.
        assert!(pages[0].matches(&escaped).count() >= 11, "{}", pages[0]);
    }
}
