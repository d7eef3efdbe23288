//! One reading of a URL: the spellings of `tests/vectors/url_spellings.json`
//! decide as the file says, and what the policy allows is the host curl and
//! Python's `urlsplit` connect to.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::process::Command;

use serde_json::{Map, Value};
use toolgate_policy::network::{Target, url_target};
use toolgate_policy::{Call, CompiledPolicy, Context, compile_manifest};

/// The shared vectors (also read by the Python tests), read when the test
/// runs: the image build compiles no test and copies no test data.
fn vectors_text() -> String {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/vectors/url_spellings.json"
    );
    std::fs::read_to_string(path).expect("tests/vectors/url_spellings.json is readable")
}

struct Case {
    arguments: Map<String, Value>,
    reason: String,
    host: Option<String>,
}

fn vectors() -> (CompiledPolicy, String, Vec<Case>) {
    let v: Value = serde_json::from_str(&vectors_text()).expect("vectors are JSON");
    let policy = compile_manifest(v["profile"].as_str().unwrap()).expect("profile compiles");
    let cases = v["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| Case {
            arguments: c["arguments"].as_object().unwrap().clone(),
            reason: c["reason"].as_str().unwrap().to_owned(),
            host: c["host"].as_str().map(str::to_owned),
        })
        .collect();
    (policy, v["tool"].as_str().unwrap().to_owned(), cases)
}

#[test]
fn every_spelling_decides_as_the_vectors_say() {
    let (policy, tool, cases) = vectors();
    assert!(cases.len() >= 30);
    for case in &cases {
        let verdict = policy.evaluate(
            &Call {
                tool: &tool,
                action: None,
                arguments: &case.arguments,
            },
            &Context::at(jiff::Timestamp::UNIX_EPOCH),
        );
        assert_eq!(verdict.reason.as_str(), case.reason, "{:?}", case.arguments);
        // Where the vectors name the host an allowed URL reaches, the
        // policy reads that host.
        if let (Some(host), Some(url)) = (&case.host, case.arguments.get("url")) {
            let judged = url_target(url.as_str().unwrap(), &[]).unwrap();
            assert_eq!(&target_text(&judged), host, "{url}");
        }
    }
}

#[test]
fn hardline_holds_under_warn_and_dry_run() {
    let (_, tool, cases) = vectors();
    let v: Value = serde_json::from_str(&vectors_text()).unwrap();
    for mode in ["warn", "dryRun"] {
        let profile = v["profile"].as_str().unwrap().replace(
            "  mode: allowAll\n",
            &format!("  mode: allowAll\n  enforcement: {mode}\n"),
        );
        let policy = compile_manifest(&profile).unwrap();
        for case in cases.iter().filter(|c| {
            ["url_ambiguous", "url_scheme_not_allowed", "hardline_cidr"]
                .contains(&c.reason.as_str())
        }) {
            let call = Call {
                tool: &tool,
                action: None,
                arguments: &case.arguments,
            };
            let verdict = policy.evaluate(&call, &Context::at(jiff::Timestamp::UNIX_EPOCH));
            assert_eq!(
                verdict.reason.as_str(),
                case.reason,
                "{mode}: {:?}",
                case.arguments
            );
        }
    }
}

/// The host an HTTP client asked a proxy for: the CONNECT target, else the
/// `Host` header; without port and brackets, lowercase.
fn proxied_host(listener: &TcpListener) -> String {
    // Bounded: a URL curl refuses never connects, and must fail, not hang.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    listener.set_nonblocking(true).unwrap();
    let stream = loop {
        match listener.accept() {
            Ok((stream, _)) => break stream,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                assert!(std::time::Instant::now() < deadline, "curl never connected");
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            Err(e) => panic!("accept: {e}"),
        }
    };
    stream.set_nonblocking(false).unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut head = Vec::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            break;
        }
        head.push(line.trim_end().to_owned());
    }
    let _ = (&stream)
        .write_all(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    let authority = match head.first().and_then(|l| l.strip_prefix("CONNECT ")) {
        Some(rest) => rest.split(' ').next().unwrap_or_default().to_owned(),
        None => head
            .iter()
            .find_map(|l| {
                l.strip_prefix("Host: ")
                    .or_else(|| l.strip_prefix("host: "))
            })
            .unwrap_or_default()
            .to_owned(),
    };
    host_of(&authority)
}

fn host_of(authority: &str) -> String {
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    };
    host.to_ascii_lowercase()
}

fn target_text(target: &Target) -> String {
    match target {
        Target::Ip(ip) => ip.to_string(),
        Target::Host(h) => h.clone(),
    }
}

/// Whatever the vectors allow, curl (through a proxy on loopback, so no
/// packet leaves the machine) and Python's `urlsplit` read as the same host
/// the policy judged.
#[test]
fn what_is_allowed_is_the_host_curl_and_python_connect_to() {
    let (policy, tool, cases) = vectors();
    // Every URL the policy allows, whatever the vectors say of it.
    let allowed: Vec<(&str, String)> = cases
        .iter()
        .filter(|c| {
            let call = Call {
                tool: &tool,
                action: None,
                arguments: &c.arguments,
            };
            let verdict = policy.evaluate(&call, &Context::at(jiff::Timestamp::UNIX_EPOCH));
            verdict.verdict == toolgate_policy::Decision::Allow
        })
        .filter_map(|c| c.arguments.get("url")?.as_str())
        .map(|url| {
            let judged = url_target(url, &[]).expect("an allowed URL has one reading");
            (url, target_text(&judged))
        })
        .collect();
    assert!(
        allowed.len() >= 8,
        "the vectors allow URLs of several forms"
    );
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let proxy = format!("http://{}", listener.local_addr().unwrap());
    for (url, host) in &allowed {
        let (url, host) = (*url, host.as_str());

        let curl = Command::new("curl")
            .args([
                "-s",
                "-o",
                "/dev/null",
                "--max-time",
                "10",
                "-x",
                &proxy,
                url,
            ])
            .spawn()
            .expect("curl is installed (.ci/run installs it)");
        let seen = proxied_host(&listener);
        let _ = { curl }.wait();
        assert_eq!(seen, host, "curl's reading of {url}");

        let python = Command::new("python3")
            .args([
                "-c",
                "import sys, urllib.parse as u; print(u.urlsplit(sys.argv[1]).hostname)",
                url,
            ])
            .output()
            .expect("python3 is installed");
        let read = String::from_utf8_lossy(&python.stdout).trim().to_owned();
        assert_eq!(read, host, "urlsplit's reading of {url}");
    }
}
