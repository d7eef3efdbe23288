//! Who is signed in, and the tokens that prove a form came from our page.
//!
//! Two ways in, and no other:
//! - **an authenticating proxy** (oauth2-proxy and the like) in front of the
//!   console sets `X-Forwarded-User` and `X-Forwarded-Groups`; they count
//!   only on a request that also carries the proxy's shared secret, and a
//!   forwarded identity without it is refused outright, never ignored into
//!   some other sign-in;
//! - **a Kubernetes bearer token** posted to the sign-in form, checked by a
//!   TokenReview, after which the console keeps the reviewed identity in a
//!   cookie it signs (HMAC-SHA256) with a key only it holds. Each sign-in
//!   is a session of its own (a random id in the cookie): signing out
//!   revokes that id on the server ([`Revocations`]), and the form token
//!   is bound to it.

use axum::http::HeaderMap;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use subtle::ConstantTimeEq;

use crate::error::ConsoleError;
use crate::sessions::Revocations;

/// The forwarded user, set by the authenticating proxy.
pub const FORWARDED_USER: &str = "x-forwarded-user";
/// The forwarded groups, comma-separated.
pub const FORWARDED_GROUPS: &str = "x-forwarded-groups";
/// The secret the proxy shares with the console.
pub const PROXY_SECRET: &str = "x-toolgate-proxy-secret";
/// The session cookie.
pub const SESSION_COOKIE: &str = "toolgate_session";
/// How long a signed-in session lasts at most (less when the token it was
/// made from expires sooner).
pub const SESSION_SECONDS: i64 = 3600;
/// Longest user name or group accepted (Kubernetes names are shorter).
const MAX_NAME: usize = 512;
/// Most groups one identity may carry.
const MAX_GROUPS: usize = 64;

/// The person the console acts as.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Identity {
    /// The user name the API server will see (impersonated).
    pub user: String,
    /// The groups it will see.
    pub groups: Vec<String>,
}

impl Identity {
    /// An identity from untrusted text, checked: names the impersonation
    /// headers carry exactly (visible ASCII and inner spaces; no commas,
    /// which separate forwarded groups), within bounds. Groups are kept
    /// sorted, so their order never matters.
    pub fn checked(user: &str, mut groups: Vec<String>) -> Result<Self, ConsoleError> {
        let ok = |s: &str| {
            !s.is_empty()
                && s.len() <= MAX_NAME
                && s.trim() == s
                && s.bytes().all(|b| (b' '..=b'~').contains(&b) && b != b',')
        };
        if !ok(user) {
            return Err(ConsoleError::Unauthenticated(
                "the user name cannot be impersonated (visible ASCII only, no commas)".into(),
            ));
        }
        if groups.len() > MAX_GROUPS || !groups.iter().all(|g| ok(g)) {
            return Err(ConsoleError::Unauthenticated(
                "a group name cannot be impersonated (visible ASCII only, no commas)".into(),
            ));
        }
        groups.sort();
        groups.dedup();
        Ok(Self {
            user: user.to_owned(),
            groups,
        })
    }

    /// [`Identity::checked`] for what a proxy forwards: names in the
    /// `system:` namespace are the API server's own (service accounts,
    /// nodes, `system:masters`), which an identity provider never vouches
    /// for, so a proxy may not forward them.
    pub fn forwarded(user: &str, groups: Vec<String>) -> Result<Self, ConsoleError> {
        let reserved = |s: &str| s.starts_with("system:");
        if reserved(user) || groups.iter().any(|g| reserved(g)) {
            return Err(ConsoleError::Unauthenticated(
                "a forwarded identity cannot be a system: user or group".into(),
            ));
        }
        Self::checked(user, groups)
    }
}

/// The console's secrets: the session key, and the proxy's shared secret
/// when sign-in is through a proxy; and the sessions signed out.
pub struct Keys {
    session: Vec<u8>,
    proxy_secret: Option<Vec<u8>>,
    /// Sessions signed out before they expired.
    pub revoked: Revocations,
}

/// Who sent a request, until when, in which session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedIn {
    /// The person.
    pub who: Identity,
    /// When this stops counting (Unix seconds; `i64::MAX` for a proxy's
    /// identity, which is asked every request).
    pub until: i64,
    /// The session id (token sign-in; `None` behind a proxy).
    pub session: Option<String>,
}

#[derive(Serialize, Deserialize)]
struct Session {
    /// The session's random id.
    #[serde(rename = "i")]
    id: String,
    #[serde(rename = "u")]
    user: String,
    #[serde(rename = "g")]
    groups: Vec<String>,
    /// Expiry, Unix seconds.
    #[serde(rename = "e")]
    expires: i64,
}

type HmacSha256 = Hmac<Sha256>;

impl Keys {
    /// Keys with this session key (at least 32 bytes) and proxy secret.
    pub fn new(session: Vec<u8>, proxy_secret: Option<String>) -> Result<Self, ConsoleError> {
        if session.len() < 32 {
            return Err(ConsoleError::Config(
                "the session key needs at least 32 bytes".into(),
            ));
        }
        let proxy_secret = proxy_secret
            .map(|s| s.trim().as_bytes().to_vec())
            .filter(|s| !s.is_empty());
        if proxy_secret.as_ref().is_some_and(|s| s.len() < 16) {
            return Err(ConsoleError::Config(
                "the proxy secret needs at least 16 bytes".into(),
            ));
        }
        Ok(Self {
            session,
            proxy_secret,
            revoked: Revocations::default(),
        })
    }

    /// A fresh random session key (sessions then end with the process).
    pub fn random_session_key() -> Result<Vec<u8>, ConsoleError> {
        let mut key = vec![0u8; 32];
        getrandom::fill(&mut key)
            .map_err(|e| ConsoleError::Config(format!("no randomness: {e}")))?;
        Ok(key)
    }

    /// Whether sign-in is through an authenticating proxy.
    pub fn proxied(&self) -> bool {
        self.proxy_secret.is_some()
    }

    fn mac(&self, parts: &[&[u8]]) -> Vec<u8> {
        let mut mac =
            HmacSha256::new_from_slice(&self.session).expect("HMAC takes a key of any length");
        for part in parts {
            mac.update(&(part.len() as u64).to_be_bytes());
            mac.update(part);
        }
        mac.finalize().into_bytes().to_vec()
    }

    /// The signed cookie value of a new session of `who`, valid until
    /// `expires` (Unix seconds).
    pub fn session_cookie(&self, who: &Identity, expires: i64) -> Result<String, ConsoleError> {
        let mut id = [0u8; 16];
        getrandom::fill(&mut id)
            .map_err(|e| ConsoleError::Config(format!("no randomness: {e}")))?;
        let body = serde_json::to_vec(&Session {
            id: hex::encode(id),
            user: who.user.clone(),
            groups: who.groups.clone(),
            expires,
        })
        .unwrap_or_default();
        let body = URL_SAFE_NO_PAD.encode(body);
        let mac = URL_SAFE_NO_PAD.encode(self.mac(&[b"session", body.as_bytes()]));
        Ok(format!("{body}.{mac}"))
    }

    fn cookie_identity(&self, value: &str, now: i64) -> Option<SignedIn> {
        let (body, mac) = value.split_once('.')?;
        let mac = URL_SAFE_NO_PAD.decode(mac).ok()?;
        let expected = self.mac(&[b"session", body.as_bytes()]);
        if !bool::from(mac.ct_eq(&expected)) {
            return None;
        }
        let session: Session = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(body).ok()?).ok()?;
        (session.expires > now).then_some(SignedIn {
            who: Identity {
                user: session.user,
                groups: session.groups,
            },
            until: session.expires,
            session: Some(session.id),
        })
    }

    /// Who sent this request: the proxy's forwarded identity (with its
    /// secret), else (token sign-in only) the session cookie; `None` when
    /// neither.
    pub fn identify(
        &self,
        headers: &HeaderMap,
        now: i64,
    ) -> Result<Option<Identity>, ConsoleError> {
        Ok(self.identify_until(headers, now)?.map(|s| s.who))
    }

    /// [`Keys::identify`], with until when and in which session. A session
    /// signed out is refused (`unauthenticated`), not taken for nobody: its
    /// cookie is a copy the browser no longer holds.
    pub fn identify_until(
        &self,
        headers: &HeaderMap,
        now: i64,
    ) -> Result<Option<SignedIn>, ConsoleError> {
        let forwarded =
            headers.contains_key(FORWARDED_USER) || headers.contains_key(FORWARDED_GROUPS);
        if forwarded {
            let Some(secret) = &self.proxy_secret else {
                return Err(ConsoleError::Unauthenticated(
                    "a forwarded identity is not accepted: this console signs in with tokens"
                        .into(),
                ));
            };
            // One value each: a proxy that appends to a header the client
            // sent would otherwise let the client's copy come first.
            for name in [FORWARDED_USER, FORWARDED_GROUPS, PROXY_SECRET] {
                if headers.get_all(name).iter().count() > 1 {
                    return Err(ConsoleError::Unauthenticated(format!(
                        "{name} sent more than once"
                    )));
                }
            }
            let sent = headers
                .get(PROXY_SECRET)
                .map(|v| v.as_bytes())
                .unwrap_or_default();
            if !bool::from(sent.ct_eq(secret.as_slice())) {
                return Err(ConsoleError::Unauthenticated(
                    "a forwarded identity from outside the authenticating proxy".into(),
                ));
            }
            let text = |name: &str| {
                headers
                    .get(name)
                    .map(|v| {
                        v.to_str().map(str::to_owned).map_err(|_| {
                            ConsoleError::Unauthenticated(format!("{name} is not text"))
                        })
                    })
                    .transpose()
            };
            let user = text(FORWARDED_USER)?
                .ok_or_else(|| ConsoleError::Unauthenticated("the proxy sent no user".into()))?;
            let groups = text(FORWARDED_GROUPS)?
                .map(|g| {
                    g.split(',')
                        .map(str::trim)
                        .filter(|g| !g.is_empty())
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default();
            return Identity::forwarded(&user, groups).map(|who| {
                Some(SignedIn {
                    who,
                    until: i64::MAX,
                    session: None,
                })
            });
        }
        if self.proxied() {
            // Behind a proxy only the proxy says who is signed in.
            return Ok(None);
        }
        let signed = cookie(headers, SESSION_COOKIE).and_then(|v| self.cookie_identity(v, now));
        if let Some(SignedIn {
            session: Some(id), ..
        }) = &signed
            && self.revoked.revoked(id)
        {
            return Err(ConsoleError::Unauthenticated(
                "this session was signed out: sign in again".into(),
            ));
        }
        Ok(signed)
    }

    /// Signs `signed`'s session out on the server, until it would have
    /// expired: its cookie counts for nothing from now on.
    pub fn sign_out(&self, signed: &SignedIn, now: i64) -> Result<(), ConsoleError> {
        let Some(id) = &signed.session else {
            return Ok(());
        };
        self.revoked
            .revoke(id, signed.until, now)
            .map_err(|retry_after| ConsoleError::Busy {
                message: "too many sessions were signed out in the last hour to record \
                          another: your sign-out was not recorded, try again later"
                    .into(),
                retry_after,
            })
    }

    /// The token a form of `signed` must carry: only our pages can read it.
    /// It is bound to the session (a new one at every sign-in), and behind a
    /// proxy, which has no sessions, to the identity.
    pub fn csrf_token(&self, signed: &SignedIn) -> String {
        let who = &signed.who;
        let groups = who.groups.join("\n");
        let session = signed.session.as_deref().unwrap_or_default();
        hex::encode(self.mac(&[
            b"csrf",
            who.user.as_bytes(),
            groups.as_bytes(),
            session.as_bytes(),
        ]))
    }

    /// Whether `token` is `signed`'s form token.
    pub fn csrf_ok(&self, signed: &SignedIn, token: &str) -> bool {
        bool::from(token.as_bytes().ct_eq(self.csrf_token(signed).as_bytes()))
    }
}

/// When a JSON Web Token says it expires (`exp`, Unix seconds), read
/// without checking its signature: only for a token the API server has just
/// accepted, so that a session never outlives it. `None` for other tokens.
pub fn token_expiry(token: &str) -> Option<i64> {
    let payload = token.trim().split('.').nth(1)?;
    let claims: serde_json::Value =
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).ok()?).ok()?;
    claims.get("exp")?.as_i64()
}

/// The value of cookie `name`, if sent.
fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(axum::http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(proxy: Option<&str>) -> Keys {
        Keys::new(vec![7; 32], proxy.map(str::to_owned)).unwrap()
    }

    fn alice() -> Identity {
        Identity::checked("alice", vec!["oncall".into()]).unwrap()
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn a_signed_session_round_trips_and_a_forged_one_does_not() {
        let k = keys(None);
        let cookie = k.session_cookie(&alice(), 1_000 + SESSION_SECONDS).unwrap();
        let h = headers(&[("cookie", &format!("a=b; {SESSION_COOKIE}={cookie}"))]);
        assert_eq!(k.identify(&h, 1_001).unwrap(), Some(alice()));
        // Expired.
        assert_eq!(k.identify(&h, 1_000 + SESSION_SECONDS).unwrap(), None);
        // Another body under the same signature, or another key's cookie.
        let (_, mac) = cookie.split_once('.').unwrap();
        let admin = URL_SAFE_NO_PAD
            .encode(br#"{"i":"00","u":"admin","g":["system:masters"],"e":9999999999}"#);
        let h = headers(&[("cookie", &format!("{SESSION_COOKIE}={admin}.{mac}"))]);
        assert_eq!(k.identify(&h, 1_001).unwrap(), None);
        let other = Keys::new(vec![8; 32], None)
            .unwrap()
            .session_cookie(&alice(), 1_000 + SESSION_SECONDS)
            .unwrap();
        let h = headers(&[("cookie", &format!("{SESSION_COOKIE}={other}"))]);
        assert_eq!(k.identify(&h, 1_001).unwrap(), None);
    }

    #[test]
    fn a_signed_out_session_is_refused_and_others_are_not() {
        let k = keys(None);
        let session = |cookie: &str| headers(&[("cookie", &format!("{SESSION_COOKIE}={cookie}"))]);
        let first = session(&k.session_cookie(&alice(), 5_000).unwrap());
        let second = session(&k.session_cookie(&alice(), 5_000).unwrap());
        let one = k.identify_until(&first, 1_000).unwrap().unwrap();
        let two = k.identify_until(&second, 1_000).unwrap().unwrap();
        assert_eq!((one.who.clone(), one.until), (alice(), 5_000));
        assert_ne!(
            one.session, two.session,
            "every sign-in is a session of its own"
        );
        k.sign_out(&one, 1_000).unwrap();
        let refused = k.identify_until(&first, 1_001).unwrap_err();
        assert_eq!(refused.code(), "unauthenticated");
        // The same person's other session is untouched.
        assert_eq!(k.identify_until(&second, 1_001).unwrap(), Some(two));
        // Remembered only as long as the cookie could have been used.
        assert_eq!(k.revoked.len(), 1);
        assert!(k.revoked.full(5_000).is_none());
    }

    #[test]
    fn a_forwarded_identity_counts_only_with_the_proxys_secret() {
        let forged = headers(&[
            ("x-forwarded-user", "admin"),
            ("x-forwarded-groups", "oncall, ops"),
        ]);
        // Token sign-in: any forwarded identity is refused.
        assert!(keys(None).identify(&forged, 0).is_err());
        let k = keys(Some("0123456789abcdef-secret"));
        assert!(k.identify(&forged, 0).is_err());
        let mut wrong = forged.clone();
        wrong.insert(PROXY_SECRET, "0123456789abcdef-secreT".parse().unwrap());
        assert!(k.identify(&wrong, 0).is_err());
        let mut right = forged.clone();
        right.insert(PROXY_SECRET, "0123456789abcdef-secret".parse().unwrap());
        let who = k.identify(&right, 0).unwrap().unwrap();
        assert_eq!(
            (who.user.as_str(), who.groups.clone()),
            ("admin", vec!["oncall".to_owned(), "ops".to_owned()])
        );
        // A second copy of any of the three headers (a proxy that appends
        // to what the client sent) is refused.
        for (name, value) in [
            ("x-forwarded-user", "mallory"),
            ("x-forwarded-groups", "admins"),
            (PROXY_SECRET, "0123456789abcdef-secret"),
        ] {
            let mut twice = right.clone();
            twice.append(name, value.parse().unwrap());
            assert!(k.identify(&twice, 0).is_err(), "{name}");
        }
        // The API server's own names are never forwarded.
        for (user, groups) in [
            ("system:serviceaccount:toolgate-system:toolgate", "oncall"),
            ("admin", "system:masters"),
        ] {
            let mut h = headers(&[("x-forwarded-user", user), ("x-forwarded-groups", groups)]);
            h.insert(PROXY_SECRET, "0123456789abcdef-secret".parse().unwrap());
            assert!(k.identify(&h, 0).is_err(), "{user} {groups}");
        }
        // Behind a proxy a session cookie counts for nothing, even a valid one.
        let cookie = k.session_cookie(&alice(), SESSION_SECONDS).unwrap();
        let h = headers(&[("cookie", &format!("{SESSION_COOKIE}={cookie}"))]);
        assert_eq!(k.identify(&h, 1).unwrap(), None);
    }

    fn in_session(who: Identity, session: Option<&str>) -> SignedIn {
        SignedIn {
            who,
            until: 1,
            session: session.map(str::to_owned),
        }
    }

    #[test]
    fn form_tokens_are_per_session_and_identity() {
        let k = keys(None);
        let mine = in_session(alice(), Some("s1"));
        let token = k.csrf_token(&mine);
        assert!(k.csrf_ok(&mine, &token));
        // The same person's other session (another sign-in) has its own.
        assert!(!k.csrf_ok(&in_session(alice(), Some("s2")), &token));
        assert!(!k.csrf_ok(&in_session(alice(), None), &token));
        let bob = Identity::checked("bob", vec!["oncall".into()]).unwrap();
        assert!(!k.csrf_ok(&in_session(bob, Some("s1")), &token));
        // The order groups arrive in does not matter.
        let ab = Identity::checked("carol", vec!["a".into(), "b".into()]).unwrap();
        let ba = Identity::checked("carol", vec!["b".into(), "a".into()]).unwrap();
        assert_eq!(
            k.csrf_token(&in_session(ab, None)),
            k.csrf_token(&in_session(ba, None))
        );
        assert!(!k.csrf_ok(&mine, ""));
    }

    #[test]
    fn tokens_cap_sessions() {
        let claims = URL_SAFE_NO_PAD.encode(br#"{"exp":1700000000,"sub":"x"}"#);
        assert_eq!(
            token_expiry(&format!("eyJhbGciOiJSUzI1NiJ9.{claims}.sig")),
            Some(1_700_000_000)
        );
        assert_eq!(token_expiry("opaque-static-token"), None);
    }

    #[test]
    fn unusable_names_are_refused() {
        assert!(Identity::checked("", vec![]).is_err());
        assert!(Identity::checked("a\nb", vec![]).is_err());
        assert!(Identity::checked("a", vec!["x,y".into()]).is_err());
        assert!(Identity::checked(" alice", vec![]).is_err());
        assert!(Identity::checked("zoë", vec![]).is_err());
        assert!(Keys::new(vec![0; 8], None).is_err());
        assert!(Keys::new(vec![0; 32], Some("short".into())).is_err());
    }
}
