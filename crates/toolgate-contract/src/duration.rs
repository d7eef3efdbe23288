//! The one duration syntax of toolgate's flags (`--valid-for`,
//! `--bundle-validity`, `--checkpoint-interval`, `--reload-interval`, ...),
//! and the instants of `--since`/`--until` written in it.

use std::fmt;

use jiff::{SignedDuration, Timestamp};

/// Parses a positive duration: one or more `<integer><unit>` pairs with
/// units `d` (24 h), `h`, `m`, `s` and `ms` (`7d`, `24h`, `1h30m`, `500ms`),
/// or ISO 8601 (`PT24H`). The error says what is wrong and shows examples.
pub fn parse_duration(text: &str) -> Result<SignedDuration, String> {
    let trimmed = text.trim();
    let parsed = if trimmed.starts_with(['P', 'p']) {
        trimmed.parse::<SignedDuration>().map_err(|e| e.to_string())
    } else {
        units(trimmed)
    };
    match parsed {
        Ok(d) if d > SignedDuration::ZERO => Ok(d),
        Ok(_) => Err(format!("duration `{text}` must be positive")),
        Err(why) => Err(format!(
            "invalid duration `{text}`: {why} (e.g. 7d, 24h, 30m, 1h30m, 500ms, PT24H)"
        )),
    }
}

/// A `--since`/`--until` value that is no instant: the flag, the value
/// as written, and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstantError {
    /// The flag, e.g. `--since`.
    pub flag: String,
    /// Its value as written.
    pub text: String,
    /// What is wrong with it.
    pub problem: InstantProblem,
}

/// What is wrong with an [`InstantError`]'s value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InstantProblem {
    /// Looks like a date or time (has `-` or `:`) but is no RFC 3339 instant.
    NotRfc3339,
    /// Neither an instant nor a duration: why it is no duration.
    Neither(String),
    /// A duration reaching before the earliest representable instant.
    TooEarly,
}

const INSTANT_EXAMPLE: &str = "an RFC 3339 instant (e.g. 2026-11-01T00:00:00Z)";

impl fmt::Display for InstantError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Self {
            flag,
            text,
            problem,
        } = self;
        match problem {
            InstantProblem::NotRfc3339 => write!(f, "{flag}: `{text}` is not {INSTANT_EXAMPLE}"),
            InstantProblem::Neither(why) => write!(
                f,
                "{flag}: `{text}` is neither {INSTANT_EXAMPLE} nor a duration before now: {why}"
            ),
            InstantProblem::TooEarly => {
                write!(f, "{flag}: `{text}` reaches before the earliest instant")
            }
        }
    }
}

impl std::error::Error for InstantError {}

/// The value of `flag` (`--since`, `--until`), if given: an RFC 3339
/// instant, or a duration (see [`parse_duration`]) meaning that long
/// before `now`.
pub fn parse_instant(
    flag: &str,
    text: Option<&str>,
    now: Timestamp,
) -> Result<Option<Timestamp>, InstantError> {
    let Some(text) = text else { return Ok(None) };
    if let Ok(at) = text.parse::<Timestamp>() {
        return Ok(Some(at));
    }
    let error = |problem| InstantError {
        flag: flag.to_owned(),
        text: text.to_owned(),
        problem,
    };
    // A mistyped date must not be reported as a bad duration.
    if text.contains(['-', ':']) {
        return Err(error(InstantProblem::NotRfc3339));
    }
    let d = parse_duration(text).map_err(|why| error(InstantProblem::Neither(why)))?;
    now.checked_sub(d)
        .map(Some)
        .map_err(|_| error(InstantProblem::TooEarly))
}

fn units(text: &str) -> Result<SignedDuration, String> {
    let mut total_ms: i64 = 0;
    let mut rest = text;
    if rest.is_empty() {
        return Err("empty".into());
    }
    while !rest.is_empty() {
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if digits == 0 {
            return Err("a unit needs a number before it".into());
        }
        let n: i64 = rest[..digits]
            .parse()
            .map_err(|_| "number too large".to_owned())?;
        rest = &rest[digits..];
        let unit_len = rest.len()
            - rest
                .trim_start_matches(|c: char| c.is_ascii_alphabetic())
                .len();
        let per_ms: i64 = match &rest[..unit_len] {
            "d" => 86_400_000,
            "h" => 3_600_000,
            "m" => 60_000,
            "s" => 1_000,
            "ms" => 1,
            "" => return Err("a number needs a unit after it".into()),
            other => return Err(format!("unknown unit `{other}`")),
        };
        rest = &rest[unit_len..];
        total_ms = n
            .checked_mul(per_ms)
            .and_then(|ms| total_ms.checked_add(ms))
            .ok_or_else(|| "too long".to_owned())?;
    }
    Ok(SignedDuration::from_millis(total_ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_every_spelling_the_flags_document() {
        for (text, secs) in [
            ("24h", 86_400),
            ("30m", 1_800),
            ("7d", 604_800),
            ("1h30m", 5_400),
            ("5s", 5),
            ("PT1H", 3_600),
            (" 10m ", 600),
        ] {
            assert_eq!(parse_duration(text).unwrap().as_secs(), secs, "{text}");
        }
        assert_eq!(parse_duration("1500ms").unwrap().as_millis(), 1_500);
    }

    #[test]
    fn refuses_what_is_not_a_positive_duration() {
        for bad in [
            "",
            "0h",
            "0s",
            "h",
            "24",
            "1x",
            "-1h",
            "1.5h",
            "soon",
            "PT0S",
            "99999999999999999999d",
            "9999999999999999d",
        ] {
            let err = parse_duration(bad).unwrap_err();
            assert!(err.contains(bad.trim()), "{bad}: {err}");
        }
    }

    #[test]
    fn instants_are_rfc3339_or_a_duration_before_now() {
        let now: Timestamp = "2026-12-06T12:00:00Z".parse().unwrap();
        let at = |t: &str| parse_instant("--since", Some(t), now).map(|t| t.unwrap().to_string());
        assert_eq!(at("1h").unwrap(), "2026-12-06T11:00:00Z");
        assert_eq!(at("7d").unwrap(), "2026-11-29T12:00:00Z");
        assert_eq!(at("2026-11-01T00:00:00Z").unwrap(), "2026-11-01T00:00:00Z");
        assert_eq!(parse_instant("--until", None, now), Ok(None));
        let err = at("2026-13-01T00:00:00Z").unwrap_err();
        assert_eq!(err.problem, InstantProblem::NotRfc3339);
        assert_eq!(
            err.to_string(),
            "--since: `2026-13-01T00:00:00Z` is not an RFC 3339 instant (e.g. 2026-11-01T00:00:00Z)"
        );
        for bad in ["yesterday", "0s", "1x", ""] {
            let err = at(bad).unwrap_err();
            assert!(matches!(err.problem, InstantProblem::Neither(_)), "{err}");
            assert_eq!((err.flag.as_str(), err.text.as_str()), ("--since", bad));
            assert!(
                err.to_string()
                    .starts_with(&format!("--since: `{bad}` is neither")),
                "{err}"
            );
        }
        let early = parse_instant("--since", Some("1d"), Timestamp::MIN).unwrap_err();
        assert_eq!(early.problem, InstantProblem::TooEarly);
    }
}
