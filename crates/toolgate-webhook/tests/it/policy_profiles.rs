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
    spec.as_object_mut().unwrap().remove("aliases");
    review
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

    // A duplicate glob is admitted, with a warning naming it.
    let duplicate = profile_review(json!({"bash": {"allow": ["ls *", "ls *"],
                                                   "escalate": ["git push*"]}}));
    let response = review(&mut client, "/validate-policyprofiles", &duplicate).await;
    assert_eq!(response["allowed"], true, "{response}");
    let warnings = response["warnings"].as_array().expect("warnings");
    assert_eq!(warnings.len(), 1, "{response}");
    let warning = warnings[0].as_str().unwrap();
    assert!(
        warning.starts_with("spec.rules.bash.allow[1]: the same glob as spec.rules.bash.allow[0]"),
        "{warning}"
    );
    assert!(warning.ends_with("[duplicate_glob]"), "{warning}");

    // Every example profile is admitted, without warnings.
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
            response.get("warnings").is_none(),
            "{}: {response}",
            file.display()
        );
    }
    server.stop().await;
}
