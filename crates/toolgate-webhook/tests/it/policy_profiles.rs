//! The PolicyProfile validating webhook over real HTTPS: invalid profiles
//! are refused with actionable messages, an escalate glob the allow tier
//! shadows too, and the cheap analysis findings come back as warnings.

use crate::common::{fixture_json, native_server, review};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_profiles_are_validated_with_actionable_messages() {
    let server = native_server().await;
    let mut client = server.client().await;

    let bad = fixture_json("policyprofile-bad-glob.json");
    let response = review(&mut client, "/validate-policyprofiles", &bad).await;
    assert_eq!(response["allowed"], false);
    assert_eq!(response["status"]["reason"], "profile_invalid_glob");
    assert_eq!(response["status"]["code"], 422);
    let message = response["status"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("spec.rules.bash.allow[0]: invalid glob ``: empty glob"),
        "{message}"
    );
    assert!(message.ends_with("[profile_invalid_glob]"), "{message}");

    let good = fixture_json("policyprofile-good.json");
    let response = review(&mut client, "/validate-policyprofiles", &good).await;
    assert_eq!(response["allowed"], true, "{response}");

    // Strict: an unknown field is named with its path.
    let mut typo = good.clone();
    typo["request"]["object"]["spec"]["rules"]["bash"]["alow"] = json!(["ls"]);
    let response = review(&mut client, "/validate-policyprofiles", &typo).await;
    assert_eq!(response["status"]["reason"], "profile_unknown_field");
    assert!(
        response["status"]["message"]
            .as_str()
            .unwrap()
            .contains("spec.rules.bash: unknown field `alow`")
    );

    // Incomplete effects matrix.
    let mut incomplete = good.clone();
    incomplete["request"]["object"]["spec"]["effects"]
        .as_object_mut()
        .unwrap()
        .remove("read_file");
    let response = review(&mut client, "/validate-policyprofiles", &incomplete).await;
    assert_eq!(response["status"]["reason"], "profile_incomplete_effects");

    // Deleting a broken profile is always possible.
    let mut delete = bad.clone();
    delete["request"]["operation"] = json!("DELETE");
    delete["request"]["oldObject"] = delete["request"]["object"].take();
    let response = review(&mut client, "/validate-policyprofiles", &delete).await;
    assert_eq!(response["allowed"], true);
    server.stop().await;
}

/// The good fixture with `spec.rules` and `spec.effects` replaced.
fn profile_review(rules: serde_json::Value) -> serde_json::Value {
    let mut review = fixture_json("policyprofile-good.json");
    let spec = &mut review["request"]["object"]["spec"];
    spec["rules"] = rules;
    spec["effects"] = json!({"bash": {"sideEffect": "PROCESS_EXEC", "risk": "high"}});
    let spec = spec.as_object_mut().unwrap();
    spec.remove("aliases");
    spec.remove("hardline");
    review
}

fn warnings(response: &serde_json::Value) -> Vec<String> {
    response["warnings"]
        .as_array()
        .map(|w| w.iter().map(|s| s.as_str().unwrap().to_owned()).collect())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadowed_escalates_are_refused_and_other_findings_warn() {
    let server = native_server().await;
    let mut client = server.client().await;

    // `git push*` is allowed by `git *` before the escalate tier runs.
    let shadowed = profile_review(json!({"bash": {"allow": ["ls", "git *"],
                                                  "escalate": ["git push*"]}}));
    let response = review(&mut client, "/validate-policyprofiles", &shadowed).await;
    assert_eq!(response["allowed"], false, "{response}");
    assert_eq!(response["status"]["reason"], "shadowed_escalate");
    assert_eq!(response["status"]["code"], 422);
    let message = response["status"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("spec.rules.bash.escalate[0]: escalate glob `git push*`"),
        "{message}"
    );
    assert!(
        message.contains("`git *` (spec.rules.bash.allow[1])"),
        "{message}"
    );
    assert!(message.ends_with("[shadowed_escalate]"), "{message}");

    // Judged as the evaluator matches: `GIT *` is allowed by its lowercase copy.
    let upper = profile_review(json!({"bash": {"allow": ["git *"], "escalate": ["GIT *"]}}));
    let response = review(&mut client, "/validate-policyprofiles", &upper).await;
    assert_eq!(
        response["status"]["reason"], "shadowed_escalate",
        "{response}"
    );

    // A duplicate glob is admitted, with a warning naming it.
    let duplicate = profile_review(json!({"bash": {"allow": ["ls *", "ls *"],
                                                   "escalate": ["git push*"]}}));
    let response = review(&mut client, "/validate-policyprofiles", &duplicate).await;
    assert_eq!(response["allowed"], true, "{response}");
    assert_eq!(
        warnings(&response),
        [
            "spec.rules.bash.allow[1]: `ls *` is the same glob as spec.rules.bash.allow[0], which decides \
          first [duplicate_glob]"
        ]
    );

    // A glob past the caps (~27 KB of distinct CJK characters, shadowed or
    // not) is admitted at once with a warning that the check was skipped.
    let cjk: String = (0x4E00u32..0x4E00 + 9_000)
        .filter_map(char::from_u32)
        .collect();
    let huge = profile_review(json!({"bash": {"allow": ["*"], "escalate": [cjk]}}));
    let started = std::time::Instant::now();
    let response = review(&mut client, "/validate-policyprofiles", &huge).await;
    assert!(started.elapsed() < std::time::Duration::from_secs(2));
    assert_eq!(response["allowed"], true, "{response}");
    let w = warnings(&response);
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].starts_with("spec.rules.bash: the shadowed-escalate check was skipped"),
        "{w:?}"
    );
    assert!(w[0].ends_with("[analysis_skipped]"), "{w:?}");

    // Warnings are few, short, one line and ASCII whatever the globs hold.
    let hostile: Vec<String> = (0..30)
        .map(|i| format!("x{i}\n\u{202e}\u{1b}[31m"))
        .collect();
    let mut allow = hostile.clone();
    allow.extend(hostile);
    let many = profile_review(json!({"bash": {"allow": allow}}));
    let response = review(&mut client, "/validate-policyprofiles", &many).await;
    assert_eq!(response["allowed"], true, "{response}");
    let w = warnings(&response);
    assert_eq!(w.len(), toolgate_policy::analyze::MAX_WARNINGS, "{w:?}");
    for line in &w {
        assert!(
            line.len() <= toolgate_policy::analyze::MAX_WARNING_CHARS,
            "{line}"
        );
        assert!(
            line.chars().all(|c| c == ' ' || c.is_ascii_graphic()),
            "{line:?}"
        );
    }
    assert!(w[0].contains("`x0\\u{a}\\u{202e}\\u{1b}[31m`"), "{w:?}");

    // Every example profile is admitted.
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/profiles");
    for file in std::fs::read_dir(dir).unwrap() {
        let file = file.unwrap().path();
        let text = std::fs::read_to_string(&file).unwrap();
        let manifest = toolgate_policy::load::parse_manifest(&text).unwrap();
        let mut example = fixture_json("policyprofile-good.json");
        example["request"]["object"]["spec"] = serde_json::to_value(&manifest.spec).unwrap();
        let response = review(&mut client, "/validate-policyprofiles", &example).await;
        assert_eq!(response["allowed"], true, "{}: {response}", file.display());
        assert!(
            warnings(&response)
                .iter()
                .all(|w| !w.contains("analysis_skipped")),
            "{}: {response}",
            file.display()
        );
    }
    server.stop().await;
}

/// Past its deadline the analysis is not waited for: a shadowed profile
/// is admitted with the skip warning (the check is advisory).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_analysis_stops_at_its_deadline() {
    let shadowed = profile_review(json!({"bash": {"allow": ["git *"], "escalate": ["git push*"]}}));
    let request = toolgate_webhook::review::AdmissionReview::from_slice(
        &serde_json::to_vec(&shadowed).unwrap(),
    )
    .unwrap();
    let response =
        toolgate_webhook::profile_check::review_within(&request, std::time::Duration::ZERO).await;
    assert!(response.allowed, "{response:?}");
    assert_eq!(response.warnings.len(), 1, "{response:?}");
    assert!(
        response.warnings[0].ends_with("[analysis_skipped]"),
        "{response:?}"
    );
    // With time, the same profile is refused.
    let response = toolgate_webhook::profile_check::review(&request).await;
    assert!(!response.allowed, "{response:?}");
}
