//! The one duration syntax of toolgate's flags (`--valid-for`,
//! `--bundle-validity`, `--checkpoint-interval`, `--reload-interval`, ...).

use jiff::SignedDuration;

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
}
