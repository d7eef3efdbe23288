//! What a notification channel must be to be accepted: keys a Secret can
//! hold, and a signing secret wherever the format is signed. The channels
//! are served by the controller.

use crate::error::PolicyError;
use crate::model::{NotifyChannel, NotifyFormat, WebhookChannel};

/// Whether `key` can be a Secret data key (`[-._a-zA-Z0-9]`, 1-253).
pub fn is_secret_key(key: &str) -> bool {
    (1..=253).contains(&key.len())
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
}

/// Checks a list of channels (`spec.approvals.notify`, or the
/// controller's cluster default, named `field`): each on its own, and no
/// two with the same format and URL key, since deliveries are remembered
/// per format and URL key and twins would share (and so lose) them.
pub fn check_channels(field: &str, channels: &[NotifyChannel]) -> Result<(), PolicyError> {
    let mut seen = std::collections::HashSet::new();
    for (i, channel) in channels.iter().enumerate() {
        let w = &channel.webhook;
        check_channel(&format!("{field}[{i}].webhook"), w)?;
        if !seen.insert((w.format, w.url_secret_key.as_str())) {
            return Err(PolicyError::InvalidValue {
                field: format!("{field}[{i}].webhook.urlSecretKey"),
                message: "the same URL key and format twice".into(),
            });
        }
    }
    Ok(())
}

/// Checks one channel, at `at`.
fn check_channel(at: &str, channel: &WebhookChannel) -> Result<(), PolicyError> {
    let refuse = |field: &str, message: String| PolicyError::InvalidValue {
        field: format!("{at}.{field}"),
        message,
    };
    let shown = |key: &str| key.chars().take(64).collect::<String>();
    if !is_secret_key(&channel.url_secret_key) {
        return Err(refuse(
            "urlSecretKey",
            format!("`{}` is not a Secret key", shown(&channel.url_secret_key)),
        ));
    }
    match &channel.signing_secret_key {
        Some(key) if !is_secret_key(key) => Err(refuse(
            "signingSecretKey",
            format!("`{}` is not a Secret key", shown(key)),
        )),
        None if channel.format == NotifyFormat::Standard => Err(refuse(
            "signingSecretKey",
            "a `standard` channel is signed: name the key of its signing secret".into(),
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use crate::load;

    fn compile(notify: &str) -> Result<crate::CompiledPolicy, crate::PolicyError> {
        let spec = format!(
            "mode: allowAll\neffects: {{}}\napprovals: {{ttlSeconds: 60, notify: [{notify}]}}\n"
        );
        let spec: crate::PolicySpec = load::from_str(&spec)?;
        crate::CompiledPolicy::compile("notify", &spec, &[])
    }

    #[test]
    fn channels_name_secret_keys_and_signed_formats_name_a_secret() {
        assert!(compile("{webhook: {urlSecretKey: url, signingSecretKey: signing}}").is_ok());
        assert!(compile("{webhook: {urlSecretKey: slack-url, format: slack}}").is_ok());
        assert!(compile("{webhook: {urlSecretKey: ce, format: cloudevents}}").is_ok());
        for (bad, field) in [
            ("{webhook: {urlSecretKey: url}}", "signingSecretKey"),
            (
                "{webhook: {urlSecretKey: 'a/b', format: slack}}",
                "urlSecretKey",
            ),
            (
                "{webhook: {urlSecretKey: u, signingSecretKey: '', format: cloudevents}}",
                "signingSecretKey",
            ),
        ] {
            let e = compile(bad).unwrap_err();
            assert_eq!(e.code(), "profile_invalid_value", "{bad}");
            assert!(e.to_string().contains(field), "{bad}: {e}");
        }
        let twins = "{webhook: {urlSecretKey: s, format: slack}}, {webhook: {urlSecretKey: s, format: slack}}";
        let e = compile(twins).unwrap_err();
        assert!(e.to_string().contains("notify[1]"), "{e}");
        let e = compile("{webhook: {urlSecretKey: u, format: email}}").unwrap_err();
        assert!(e.to_string().contains("email"), "{e}");
        let e = compile("{webhook: {urlSecretRef: {name: x, key: y}}}").unwrap_err();
        assert_eq!(e.code(), "profile_unknown_field", "{e}");
    }
}
