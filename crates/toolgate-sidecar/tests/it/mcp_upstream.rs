//! The HTTP gateway's connection guard: the address a name resolves to is
//! checked against the hardline CIDRs when the connection is made, not only
//! the URL's text.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::json;

use crate::common::*;

/// `localhost` passes the egress allow-list by name; only its address
/// (127.0.0.1) is in the hardline ranges.
fn spec(hardline: &str) -> String {
    format!(
        "mode: rules\nrules:\n  demo.echo: {{allow: [\"*\"]}}\neffects:\n  \
         demo.echo: {{sideEffect: NONE, risk: low}}\negress: {{allowHosts: [localhost]}}\n\
         hardline: {{cidrs: [\"{hardline}\"]}}\n"
    )
}

/// A loopback listener that counts the connections made to it.
async fn counting_listener() -> (u16, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = seen.clone();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            drop(socket);
        }
    });
    (port, seen)
}

#[tokio::test]
async fn a_name_resolving_to_a_hardline_address_is_never_connected_to() {
    let scratch = tempfile::tempdir().unwrap();
    for (hardline, refused) in [("127.0.0.0/8", true), ("169.254.0.0/16", false)] {
        let (port, seen) = counting_listener().await;
        let dir = scratch
            .path()
            .join(if refused { "refused" } else { "allowed" });
        std::fs::create_dir_all(&dir).unwrap();
        // A database each: both bundles are sequence 1.
        let url = format!("sqlite://{}?mode=rwc", dir.join("toolgate.db").display());
        let upstream = format!("http://localhost:{port}/mcp");
        let mut h = Harness::start_configured(
            &dir,
            &url,
            Some(&bundle(&spec(hardline), 1, day(), &key())),
            &unique("t"),
            |c| c.mcp_upstreams = vec![("demo".to_owned(), upstream.clone())],
        )
        .await;
        h.wait_for_version(|v| v.is_some()).await;
        let (status, body) = h
            .post(
                "/mcp/demo",
                json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}),
            )
            .await;
        if refused {
            assert_eq!(status, 403, "{body}");
            assert_eq!(body["error"]["code"], "mcp_upstream_not_allowed", "{body}");
            assert!(
                body["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("hardline_cidr"),
                "{body}"
            );
            assert_eq!(seen.load(Ordering::SeqCst), 0, "the gateway connected");
        } else {
            // The same name, with 127.0.0.0/8 not hardlined, is connected to
            // (the listener hangs up, so the answer itself is an error).
            assert_eq!(seen.load(Ordering::SeqCst), 1, "{status} {body}");
        }
        h.stop().await;
    }
}
