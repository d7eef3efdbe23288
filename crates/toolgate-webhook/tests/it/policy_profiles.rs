//! The PolicyProfile validating webhook over real HTTPS: invalid profiles
//! are refused with actionable messages.

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
