//! Helpers shared by the tests that run the real `toolgate` binary.

use std::path::Path;
use std::process::{Child, Command, Stdio};

/// Runs the `toolgate` binary to completion.
pub fn toolgate(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(args)
        .output()
        .expect("run toolgate")
}

/// A fresh signing key in `dir/signing.pem`, its public key in
/// `dir/trust.pem`, and another key's public key in `dir/other.pem` (a
/// trust set that must not verify): their paths, in that order.
pub fn key_files(dir: &Path) -> (String, String, String) {
    let key = toolgate_bundle::SigningKey::generate();
    let paths = ["signing.pem", "trust.pem", "other.pem"].map(|n| dir.join(n));
    key.write_file(&paths[0]).unwrap();
    key.public_key().write_file(&paths[1]).unwrap();
    toolgate_bundle::SigningKey::generate()
        .public_key()
        .write_file(&paths[2])
        .unwrap();
    let [a, b, c] = paths.map(|p| p.to_str().unwrap().to_owned());
    (a, b, c)
}

/// A loopback port nothing listens on (yet).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A sidecar process killed when dropped, so a failing test leaves none
/// running (one that outlives its test holds the test's ports, database and
/// inherited file descriptors).
pub struct SidecarProcess(pub Child);

impl std::ops::Deref for SidecarProcess {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for SidecarProcess {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for SidecarProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `toolgate sidecar` with `dir/bundle.json`, `dir/keys/signing.pub`
/// and a workspace under `dir/ws`, on `127.0.0.1:port`, ops listener off.
pub fn spawn_sidecar(dir: &Path, database: &str, port: u16, tenant: &str) -> SidecarProcess {
    spawn_sidecar_ops(dir, database, port, tenant, None)
}

/// [`spawn_sidecar`] with the ops listener (metrics) on `127.0.0.1:ops`
/// when given.
pub fn spawn_sidecar_ops(
    dir: &Path,
    database: &str,
    port: u16,
    tenant: &str,
    ops: Option<u16>,
) -> SidecarProcess {
    let ops = ops.map_or("off".to_owned(), |p| format!("127.0.0.1:{p}"));
    let child = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["sidecar", "--bundle"])
        .arg(dir.join("bundle.json"))
        .arg("--trust")
        .arg(dir.join("keys/signing.pub"))
        .args(["--database", database, "--listen"])
        .arg(format!("127.0.0.1:{port}"))
        .args(["--ops-listen", &ops, "--tenant", tenant, "--workspace-base"])
        .arg(dir.join("ws"))
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn sidecar");
    SidecarProcess(child)
}

/// A call an agent makes: (run, tool, its one argument, the verdict the
/// sidecar must answer). Tool `bash` takes `command`, any other `path`.
pub type AgentCall<'a> = (&'a str, &'a str, &'a str, &'a str);

/// Starts a sidecar on `dir`'s bundle and `database` (see
/// [`spawn_sidecar_ops`]) and makes `calls` through `/v1/authorize`,
/// asserting each verdict. The sidecar is returned running (its log
/// writes in the background) with its base URL.
pub async fn record_calls(
    dir: &Path,
    database: &str,
    tenant: &str,
    ops: Option<u16>,
    calls: &[AgentCall<'_>],
) -> (SidecarProcess, String) {
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let mut child = spawn_sidecar_ops(dir, database, port, tenant, ops);
    let client = reqwest::Client::new();
    wait_ready(&client, &base, &mut child).await;
    for (i, (run, tool, arg, verdict)) in calls.iter().enumerate() {
        let name = if *tool == "bash" { "command" } else { "path" };
        let body = serde_json::json!({"tool": tool, "arguments": {name: arg}, "run_id": run, "step_id": format!("s{i}")});
        let answer: serde_json::Value = client
            .post(format!("{base}/v1/authorize"))
            .json(&body)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(answer["verdict"], *verdict, "{body} → {answer}");
    }
    (child, base)
}

/// Waits until the sidecar at `base` answers `/readyz`; fails the test if
/// it exits first or is not ready within 30 s.
pub async fn wait_ready(client: &reqwest::Client, base: &str, child: &mut SidecarProcess) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while std::time::Instant::now() < deadline {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("sidecar exited before becoming ready: {status}");
        }
        if let Ok(r) = client.get(format!("{base}/readyz")).send().await
            && r.status().is_success()
        {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("sidecar never became ready");
}

/// A fresh key pair in `dir/keys` and `dir/bundle.json` signed from the
/// profile file `profile` (shadowing the profile file `candidate` when
/// given), sequence 1: the build's JSON summary.
pub fn signed_bundle(dir: &Path, profile: &Path, candidate: Option<&Path>) -> serde_json::Value {
    let keys = dir.join("keys");
    assert!(
        toolgate(&["keygen", "--out", keys.to_str().unwrap()])
            .status
            .success()
    );
    let (key, out) = (keys.join("signing.key"), dir.join("bundle.json"));
    let mut args = vec![
        "bundle",
        "build",
        "--profile",
        profile.to_str().unwrap(),
        "--key",
        key.to_str().unwrap(),
        "--sequence",
        "1",
        "--out",
        out.to_str().unwrap(),
    ];
    if let Some(candidate) = candidate {
        args.extend(["--candidate", candidate.to_str().unwrap()]);
    }
    let built = toolgate(&args);
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stdout)
    );
    serde_json::from_slice(&built.stdout).unwrap()
}
