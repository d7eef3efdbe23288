//! The console's pages, built with `maud`, which escapes every interpolated
//! string: a preview holding `<script>` is shown as those characters. No
//! inline script or style (the Content-Security-Policy forbids them) and no
//! third-party asset.

use jiff::Timestamp;
use maud::{DOCTYPE, Markup, html};
use toolgate_k8s::crd::Approval;

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
                            "Signed in as " strong #who { (who.user) }
                            @if !who.groups.is_empty() { " (" (who.groups.join(", ")) ")" }
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
            @if let Some(m) = message { p.error role="alert" { (m) } }
            form method="post" action="/login" {
                label for="token" { "Kubernetes token" }
                textarea #token name="token" rows="4" autocomplete="off" required {}
                p.hint { "From " code { "kubectl create token NAME" } " or your identity provider; it is checked by a TokenReview and not stored." }
                button type="submit" #sign-in { "Sign in" }
            }
        },
    )
}

/// `text` with the characters that change how text around them looks
/// without showing themselves (bidirectional overrides and isolates,
/// zero-width characters) written out, so an agent cannot make a command
/// read as another.
fn visible(text: &str) -> String {
    text.chars()
        .map(|c| {
            let hidden = matches!(c, '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}'
                | '\u{2060}'..='\u{2069}' | '\u{FEFF}' | '\u{00AD}');
            if hidden {
                format!("\\u{{{:04X}}}", c as u32)
            } else {
                c.to_string()
            }
        })
        .collect()
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
                @let r = a.spec.request.as_ref().expect("pending approvals have a request");
                @let status = a.status.as_ref();
                article.approval data-name=(name) {
                    h3 { code.tool { (visible(&r.tool)) } " · " span.tenant { (r.tenant) } }
                    pre.preview { (visible(r.preview.as_deref().unwrap_or("(no preview)"))) }
                    dl {
                        dt { "Run" } dd { code { (visible(&r.run_id)) } }
                        dt { "Requested by" } dd { (visible(r.requested_by.as_deref().unwrap_or("-"))) }
                        dt { "Policy" } dd { code { (r.policy_version) } }
                        dt { "Time left" } dd.left { (time_left(status.and_then(|s| s.expires_at.as_deref()), now)) }
                        @if let Some(m) = status.and_then(|s| s.message.as_deref()) {
                            dt { "Note" } dd.note { (m) }
                        }
                    }
                    form method="post" action={ "/approvals/" (name) } {
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
                thead { tr { th { "Tool" } th { "Tenant" } th { "Outcome" } th { "By" } th { "Reason" } th { "Note" } } }
                tbody {
                    @for a in &decided {
                        @let r = a.spec.request.as_ref().expect("filtered on requests");
                        tr {
                            td { code { (r.tool) } }
                            td { (r.tenant) }
                            td.outcome { (a.status.as_ref().and_then(|s| s.phase).map_or("-".to_owned(), |p| format!("{p:?}"))) }
                            td { (a.spec.decided_by.as_deref().unwrap_or("-")) }
                            td { (a.spec.reason.as_deref().unwrap_or("")) }
                            // Why a decision was not recorded (not an approver, …).
                            td.note { (a.status.as_ref().and_then(|s| s.message.as_deref()).unwrap_or("")) }
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
            @if let Some(n) = notice { p.notice role="status" { (n) } }
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
            p.error role="alert" data-code=(code) { (message) }
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
        assert_eq!(visible("rm -rf /\u{202E}gnp.x"), "rm -rf /\\u{202E}gnp.x");
    }
}
