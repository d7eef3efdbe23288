//! Where a notification may be sent: checked as the sidecar checks an MCP
//! upstream, at connect time. Whoever may write a namespace's Secret
//! `toolgate-notify` chooses the URL, so the controller must not become
//! their way into the cloud metadata service or its own pod's loopback.
//!
//! A URL's host is resolved here and every address is checked; only the
//! addresses that pass are handed to the connector (no second lookup a
//! re-bound name could answer differently). An address is refused when a
//! connection to it reaches ([`reached_addresses`]: IPv4-mapped, NAT64,
//! 6to4 … forms included) a range of [`REFUSED`] (loopback, link-local,
//! cloud metadata) or falls in the profile's `hardline.cidrs`
//! ([`CompiledPolicy::refuses_address`], the gateway's rule), unless every
//! address it reaches is in a range the operator allows
//! (`--notify-allow-cidr`). An address literal in the URL is checked the
//! same way before anything is sent. Redirects are never followed and
//! proxy variables are ignored: where the controller connects is decided
//! here.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, LazyLock, OnceLock};
use std::time::Duration;

use futures::future::BoxFuture;
use ipnet::IpNet;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use toolgate_policy::CompiledPolicy;
use toolgate_policy::network::reached_addresses;

use super::Outgoing;
use crate::crd::PolicyProfile;

/// How long one POST may take.
const SEND_TIMEOUT: Duration = Duration::from_secs(10);
/// How long connecting may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// Ranges no notification reaches unless the operator allows them, with
/// what they are: loopback, link-local (where most clouds serve their
/// metadata, `169.254.169.254`) and the other metadata endpoints (AWS's
/// IPv6 `fd00:ec2::254`, GCP's `fd20:ce::254`, Alibaba's
/// `100.100.100.200`). `0.0.0.0/8` and `::` reach loopback and are refused
/// with it.
pub const REFUSED: [(&str, &str); 7] = [
    ("127.0.0.0/8", "loopback"),
    ("::1/128", "loopback"),
    ("169.254.0.0/16", "link-local (cloud metadata)"),
    ("fe80::/10", "link-local"),
    ("fd00:ec2::/32", "cloud metadata"),
    ("fd20:ce::254/128", "cloud metadata"),
    ("100.100.100.200/32", "cloud metadata"),
];

fn refused_ranges() -> &'static [(IpNet, &'static str)] {
    static RANGES: LazyLock<Vec<(IpNet, &'static str)>> = LazyLock::new(|| {
        REFUSED
            .iter()
            .filter_map(|(net, what)| net.parse().ok().map(|n| (n, *what)))
            .collect()
    });
    &RANGES
}

/// Looks a host name up: the system resolver, or a stand-in in tests.
pub type Lookup = Arc<dyn Fn(String) -> BoxFuture<'static, io::Result<Vec<IpAddr>>> + Send + Sync>;

fn system_lookup() -> Lookup {
    Arc::new(|host: String| {
        Box::pin(async move {
            let found = tokio::net::lookup_host((host.as_str(), 0)).await?;
            Ok(found.map(|a| a.ip()).collect())
        })
    })
}

/// Why a delivery was not attempted: no address of its host may be
/// reached. Its message ends with the stable code
/// `notify_destination_refused`.
#[derive(Debug, thiserror::Error)]
#[error("{host}: {why}; refused as a notification destination (notify_destination_refused)")]
pub struct Refused {
    host: String,
    why: String,
}

/// The destination rule of one profile's channels.
#[derive(Clone)]
pub struct Destinations {
    /// Ranges allowed although refused otherwise (`--notify-allow-cidr`).
    allowed: Arc<[IpNet]>,
    /// The profile whose `hardline.cidrs` apply, compiled on first use.
    profile: Option<Arc<PolicyProfile>>,
    compiled: Arc<OnceLock<Result<CompiledPolicy, String>>>,
    lookup: Lookup,
}

impl std::fmt::Debug for Destinations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Destinations")
            .field("allowed", &self.allowed)
            .finish_non_exhaustive()
    }
}

impl Destinations {
    /// The rule for `profile`'s channels (`None`: the built-in ranges
    /// only), with the operator's `allowed` ranges.
    pub fn new(allowed: Arc<[IpNet]>, profile: Option<Arc<PolicyProfile>>) -> Self {
        Self {
            allowed,
            profile,
            compiled: Arc::new(OnceLock::new()),
            lookup: system_lookup(),
        }
    }

    /// The same rule, names looked up by `lookup`.
    pub fn with_lookup(mut self, lookup: Lookup) -> Self {
        self.lookup = lookup;
        self
    }

    /// Why a connection to `ip` is refused; `None` when it may be made.
    pub fn refusal(&self, ip: IpAddr) -> Option<String> {
        let reached = reached_addresses(ip);
        if reached
            .iter()
            .all(|a| self.allowed.iter().any(|n| n.contains(a)))
        {
            return None;
        }
        for a in &reached {
            if let Some((net, what)) = refused_ranges().iter().find(|(n, _)| n.contains(a)) {
                return Some(format!("{ip} is {what} ({net})"));
            }
        }
        let profile = self.profile.as_ref()?;
        let compiled = self.compiled.get_or_init(|| {
            let name = kube::ResourceExt::name_any(profile.as_ref());
            CompiledPolicy::compile(&name, &profile.spec, &[]).map_err(|e| e.to_string())
        });
        match compiled {
            Ok(policy) => policy
                .refuses_address(ip)
                .then(|| format!("{ip} is in the profile's hardline CIDRs")),
            // Its hardline cannot be read: nothing is sent until it can.
            Err(e) => Some(format!("the profile does not compile ({e})")),
        }
    }

    /// `ips` split into those that may be connected to and why the others
    /// may not.
    fn split(&self, ips: Vec<IpAddr>) -> (Vec<IpAddr>, Vec<String>) {
        let mut kept = Vec::new();
        let mut why = Vec::new();
        for ip in ips {
            match self.refusal(ip) {
                None => kept.push(ip),
                Some(w) => why.push(w),
            }
        }
        (kept, why)
    }
}

/// Resolves through [`Destinations::lookup`], keeping what the rule allows.
struct Guarded(Destinations);

impl Resolve for Guarded {
    fn resolve(&self, name: Name) -> Resolving {
        let rule = self.0.clone();
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let found = (rule.lookup)(host.clone()).await?;
            let (kept, why) = rule.split(found);
            if kept.is_empty() {
                let why = if why.is_empty() {
                    "no address".to_owned()
                } else {
                    why.join(", ")
                };
                return Err(
                    Box::new(Refused { host, why }) as Box<dyn std::error::Error + Send + Sync>
                );
            }
            Ok(Box::new(kept.into_iter().map(|ip| SocketAddr::new(ip, 0))) as Addrs)
        })
    }
}

/// The [`Refused`] behind a failed request, if that was the cause.
fn refused_cause(error: &reqwest::Error) -> Option<String> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = source {
        if let Some(r) = e.downcast_ref::<Refused>() {
            return Some(r.to_string());
        }
        source = e.source();
    }
    None
}

/// POSTs `out` to `url` if `rule` lets it reach the address; `Err` says
/// why it was not accepted (a refusal names `notify_destination_refused`).
pub async fn post(rule: &Destinations, url: &str, out: Outgoing) -> Result<(), String> {
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("the URL does not parse: {e}"))?;
    let host = parsed.host_str().unwrap_or_default().to_owned();
    if !matches!(parsed.scheme(), "http" | "https") || host.is_empty() {
        return Err(Refused {
            host,
            why: "only http and https URLs with a host are sent to".into(),
        }
        .to_string());
    }
    // An address literal is connected to without a lookup: checked here.
    if let Ok(ip) = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<IpAddr>()
        && let Some(why) = rule.refusal(ip)
    {
        return Err(Refused { host, why }.to_string());
    }
    let client = reqwest::Client::builder()
        .timeout(SEND_TIMEOUT)
        .connect_timeout(CONNECT_TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .dns_resolver(Arc::new(Guarded(rule.clone())))
        .build()
        .map_err(|e| format!("HTTP client: {e}"))?;
    let mut request = client.post(parsed).body(out.body);
    for (name, value) in out.headers {
        request = request.header(name, value);
    }
    match request.send().await {
        Ok(r) if r.status().is_success() => Ok(()),
        Ok(r) if r.status().is_redirection() => Err(format!(
            "HTTP {}: redirects are not followed (notify_redirect_refused)",
            r.status().as_u16()
        )),
        Ok(r) => Err(format!("HTTP {}", r.status().as_u16())),
        Err(e) => Err(refused_cause(&e).unwrap_or_else(|| e.without_url().to_string())),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;

    /// A receiver on `addr` answering every request with `response`; the
    /// count of connections it accepted.
    async fn receiver(addr: &str, response: String) -> (SocketAddr, Arc<AtomicUsize>) {
        let listener = TcpListener::bind(addr).await.unwrap();
        let local = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                let response = response.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 65536];
                    let _ = stream.read(&mut buf).await;
                    let _ = stream.write_all(response.as_bytes()).await;
                    let _ = stream.shutdown().await;
                });
            }
        });
        (local, accepted)
    }

    const NO_CONTENT: &str = "HTTP/1.1 204 No Content\r\nconnection: close\r\n\r\n";

    fn out() -> Outgoing {
        Outgoing {
            body: b"{}".to_vec(),
            headers: vec![("content-type", "application/json".into())],
        }
    }

    fn rule(allowed: &[&str]) -> Destinations {
        let allowed: Vec<IpNet> = allowed.iter().map(|n| n.parse().unwrap()).collect();
        Destinations::new(allowed.into(), None)
    }

    /// Names looked up in `table`, every other one unknown; each lookup
    /// counted.
    fn names(table: &[(&str, &str)], lookups: Arc<AtomicUsize>) -> Lookup {
        let table: HashMap<String, IpAddr> = table
            .iter()
            .map(|(n, ip)| ((*n).to_owned(), ip.parse().unwrap()))
            .collect();
        Arc::new(move |host: String| {
            lookups.fetch_add(1, Ordering::SeqCst);
            let found = table.get(&host).copied();
            Box::pin(async move {
                found
                    .map(|ip| vec![ip])
                    .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, host))
            })
        })
    }

    #[test]
    fn loopback_link_local_and_metadata_are_refused_in_every_spelling() {
        let r = rule(&[]);
        for ip in [
            "127.0.0.1",
            "127.1.2.3",
            "0.0.0.0",
            "::1",
            "::",
            "::ffff:127.0.0.1",
            "169.254.169.254",
            "::ffff:169.254.169.254",
            "64:ff9b::a9fe:a9fe",
            "2002:a9fe:a9fe::1",
            "fe80::1",
            "fd00:ec2::254",
            "fd20:ce::254",
            "100.100.100.200",
        ] {
            assert!(r.refusal(ip.parse().unwrap()).is_some(), "{ip}");
        }
        for ip in [
            "93.184.216.34",
            "10.0.0.1",
            "2606:4700::1",
            "100.100.100.201",
        ] {
            assert_eq!(r.refusal(ip.parse().unwrap()), None, "{ip}");
        }
        let why = r.refusal("169.254.169.254".parse().unwrap()).unwrap();
        assert!(why.contains("169.254.0.0/16"), "{why}");
        // An allowance lifts its range only, and only for addresses that
        // reach nothing outside it.
        let r = rule(&["127.0.0.0/8"]);
        assert_eq!(r.refusal("127.0.0.1".parse().unwrap()), None);
        assert!(r.refusal("0.0.0.0".parse().unwrap()).is_some());
        assert!(r.refusal("169.254.169.254".parse().unwrap()).is_some());
        assert!(r.refusal("::1".parse().unwrap()).is_some());
    }

    #[test]
    fn the_profiles_hardline_cidrs_are_refused_unless_allowed() {
        let profile: PolicyProfile = serde_json::from_value(serde_json::json!({
            "apiVersion": "toolgate.dev/v1alpha1", "kind": "PolicyProfile",
            "metadata": {"name": "p", "namespace": "agents"},
            "spec": {"mode": "rules", "hardline": {"cidrs": ["10.0.0.0/8"]}},
        }))
        .unwrap();
        let profile = Arc::new(profile);
        let r = Destinations::new(Arc::new([]), Some(profile.clone()));
        let why = r.refusal("10.1.2.3".parse().unwrap()).unwrap();
        assert!(why.contains("hardline"), "{why}");
        assert!(r.refusal("::ffff:10.1.2.3".parse().unwrap()).is_some());
        assert_eq!(r.refusal("11.1.2.3".parse().unwrap()), None);
        let allowed: Vec<IpNet> = vec!["10.1.0.0/16".parse().unwrap()];
        let r = Destinations::new(allowed.into(), Some(profile));
        assert_eq!(r.refusal("10.1.2.3".parse().unwrap()), None);
        assert!(r.refusal("10.2.0.1".parse().unwrap()).is_some());
    }

    #[tokio::test]
    async fn a_loopback_receiver_is_reached_only_through_the_allowance() {
        let (addr, accepted) = receiver("127.0.0.1:0", NO_CONTENT.into()).await;
        let url = format!("http://127.0.0.1:{}/hook", addr.port());
        let err = post(&rule(&[]), &url, out()).await.unwrap_err();
        assert!(err.contains("notify_destination_refused"), "{err}");
        assert!(err.contains("loopback"), "{err}");
        // A name for it is refused the same way, after its lookup.
        let lookups = Arc::new(AtomicUsize::new(0));
        let named = rule(&[]).with_lookup(names(&[("hooks.test", "127.0.0.1")], lookups.clone()));
        let url_named = format!("http://hooks.test:{}/hook", addr.port());
        let err = post(&named, &url_named, out()).await.unwrap_err();
        assert!(
            err.contains("hooks.test") && err.contains("loopback"),
            "{err}"
        );
        assert_eq!(lookups.load(Ordering::SeqCst), 1);
        assert_eq!(accepted.load(Ordering::SeqCst), 0, "never connected");
        // Allowed, both are delivered.
        post(&rule(&["127.0.0.0/8"]), &url, out()).await.unwrap();
        let named =
            rule(&["127.0.0.1/32"]).with_lookup(names(&[("hooks.test", "127.0.0.1")], lookups));
        post(&named, &url_named, out()).await.unwrap();
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_name_for_the_metadata_address_is_refused_before_connecting() {
        let lookups = Arc::new(AtomicUsize::new(0));
        let table = [("metadata.test", "169.254.169.254")];
        // Even with loopback allowed, as in a test cluster.
        let r = rule(&["127.0.0.0/8"]).with_lookup(names(&table, lookups.clone()));
        let started = std::time::Instant::now();
        let err = post(&r, "http://metadata.test/latest/meta-data/", out())
            .await
            .unwrap_err();
        assert!(
            err.contains("notify_destination_refused") && err.contains("169.254.169.254"),
            "{err}"
        );
        // Refused at once: no connection was tried (one would wait out
        // the connect timeout, nothing answering there).
        assert!(
            started.elapsed() < CONNECT_TIMEOUT,
            "{:?}",
            started.elapsed()
        );
        assert_eq!(lookups.load(Ordering::SeqCst), 1);
        for url in [
            "http://169.254.169.254/latest/meta-data/",
            "http://[::ffff:a9fe:a9fe]/",
            "http://[fd00:ec2::254]/",
        ] {
            let err = post(&r, url, out()).await.unwrap_err();
            assert!(err.contains("notify_destination_refused"), "{url}: {err}");
        }
        assert_eq!(
            lookups.load(Ordering::SeqCst),
            1,
            "literals are not looked up"
        );
    }

    #[tokio::test]
    async fn a_redirect_to_loopback_is_not_followed() {
        // The stand-in for a public receiver: 127.0.0.2, the one address
        // allowed, behind a name; it redirects to 127.0.0.1.
        let (sink, sunk) = receiver("127.0.0.1:0", NO_CONTENT.into()).await;
        let redirect = format!(
            "HTTP/1.1 307 Temporary Redirect\r\nlocation: http://127.0.0.1:{}/\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
            sink.port()
        );
        let (public, hit) = receiver("127.0.0.2:0", redirect).await;
        let lookups = Arc::new(AtomicUsize::new(0));
        let r =
            rule(&["127.0.0.2/32"]).with_lookup(names(&[("public.test", "127.0.0.2")], lookups));
        let url = format!("http://public.test:{}/hook", public.port());
        let err = post(&r, &url, out()).await.unwrap_err();
        assert!(
            err.contains("HTTP 307") && err.contains("notify_redirect_refused"),
            "{err}"
        );
        assert_eq!(hit.load(Ordering::SeqCst), 1);
        assert_eq!(
            sunk.load(Ordering::SeqCst),
            0,
            "the redirect's target is never reached"
        );
    }
}
