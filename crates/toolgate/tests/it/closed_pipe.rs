//! Output to a reader that went away (`toolgate … | head -1`) ends the
//! command quietly with status 0, as ripgrep's does: before, `println!`
//! panicked with a backtrace hint and status 101.

use std::io::Read;
use std::process::{Command, Stdio};

/// Runs `toolgate args` with its stdout a pipe whose reading end is closed
/// before the command writes: (exit code, stderr).
fn into_closed_pipe(args: &[&str]) -> (Option<i32>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(args)
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run toolgate");
    drop(child.stdout.take());
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut stderr)
        .unwrap();
    (child.wait().unwrap().code(), stderr)
}

#[test]
fn a_closed_pipe_ends_output_quietly() {
    for args in [
        vec!["crdgen"],
        vec![
            "check",
            "--profile",
            "examples/profiles/safe-coding.yaml",
            "--tool",
            "bash",
            "--args",
            r#"{"command": "ls"}"#,
        ],
        vec![
            "test",
            "--profile",
            "examples/profiles/safe-coding.yaml",
            "examples/cases/safe-coding.yaml",
        ],
    ] {
        let (code, stderr) = into_closed_pipe(&args);
        assert_eq!(code, Some(0), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(stderr.is_empty(), "{args:?}: {stderr}");
    }
}
