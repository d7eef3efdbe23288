//! Run ids have one spelling: every look-alike of an id is refused or is
//! the id itself (issue #31, item 8).

use proptest::prelude::*;
use toolgate_policy::RunId;

/// What an agent could add to an id to make "another" run of it.
const DISGUISES: [&str; 10] = [
    " ", ".", "-", "/", "\u{a0}", "\u{200b}", "\u{feff}", "\t", "\u{3000}", "\u{2060}",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("TOOLGATE_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(256)
    ))]

    /// Whatever the text, parsing refuses it or yields a canonical id that
    /// parses to itself.
    #[test]
    fn parse_is_canonical_and_idempotent(text in "\\PC{0,20}|[A-Za-z0-9._:/ -]{0,20}") {
        if let Ok(id) = RunId::parse(&text) {
            prop_assert!(RunId::is_canonical(id.as_str()));
            prop_assert_eq!(RunId::parse(id.as_str()).unwrap(), id.clone());
            prop_assert_eq!(id.as_str(), text.to_ascii_lowercase());
        }
    }

    /// A disguised id (case changed, a separator, space or invisible
    /// character added, a letter made full-width) is refused or equal.
    #[test]
    fn look_alikes_are_refused_or_equal(
        id in "[a-z0-9][a-z0-9._:-]{0,20}[a-z0-9]",
        disguise in prop::sample::select(DISGUISES.to_vec()),
        at_end in any::<bool>(),
        upper in any::<bool>(),
    ) {
        let id = RunId::parse(&id).unwrap();
        let mut text = if upper { id.as_str().to_ascii_uppercase() } else { id.as_str().to_owned() };
        if at_end { text.push_str(disguise) } else { text.insert_str(0, disguise) }
        match RunId::parse(&text) {
            Ok(other) => prop_assert_eq!(other, id.clone()),
            Err(e) => prop_assert_eq!(e.code(), "invalid_run_id"),
        }
        // A full-width first letter (U+FF41 is `a`).
        let first = id.as_str().chars().next().unwrap();
        if first.is_ascii_lowercase() {
            let wide = char::from_u32(0xFF41 + (first as u32 - 'a' as u32)).unwrap();
            let text = format!("{wide}{}", &id.as_str()[1..]);
            prop_assert!(RunId::parse(&text).is_err());
        }
    }
}
