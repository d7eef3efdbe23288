//! Exact algebra over the languages of fnmatch globs (see [`crate::fnmatch`]
//! for the syntax): containment, equivalence, intersection and a shortest
//! witness string, decided by automata rather than by sampling.
//!
//! The globs of one question share an alphabet: Unicode is cut into
//! intervals at every character or range bound any of them names, so every
//! literal, set and `?` is a union of whole intervals and one representative
//! character stands for each. A glob becomes a small NFA (one state per
//! position; a star loops), all globs run together through one subset
//! construction, and a breadth-first walk visits every reachable
//! combination of "which globs match" with the shortest string reaching it.
//!
//! These are the plain languages. The evaluator also tries a text's
//! lowercase copy; `toolgate analyze` and admission judge rules that way,
//! through the same automaton ([`super::bounded`]).

use super::bounded::{self, Budget, Matching};

/// Most DFA states one exploration may build before it gives up: a glob
/// set this tangled is reported as too complex, never answered wrongly.
pub const MAX_STATES: usize = 200_000;

/// One piece of a glob before the alphabet is known.
#[derive(Debug, Clone)]
pub(super) enum Piece {
    Star,
    /// Inclusive code-point ranges; `negated` takes the complement.
    Set {
        ranges: Vec<(u32, u32)>,
        negated: bool,
    },
}

/// Parses `glob` as [`crate::fnmatch::to_regex`] reads it. A leading `**/`
/// (`(.*/)?` there) becomes two alternatives: the rest, and `*/` + the rest.
pub(super) fn parse(glob: &str) -> Vec<Vec<Piece>> {
    let chars: Vec<char> = glob.chars().collect();
    let double = glob.starts_with("**/");
    let mut i = if double { 3 } else { 0 };
    let mut body = Vec::new();
    let literal = |c: char| Piece::Set {
        ranges: vec![(c as u32, c as u32)],
        negated: false,
    };
    while i < chars.len() {
        let c = chars[i];
        i += 1;
        match c {
            '*' => {
                while chars.get(i) == Some(&'*') {
                    i += 1;
                }
                body.push(Piece::Star);
            }
            '?' => body.push(Piece::Set {
                ranges: Vec::new(),
                negated: true,
            }),
            '[' => match class_end(&chars, i) {
                Some(end) => {
                    body.push(class(&chars[i..end]));
                    i = end + 1;
                }
                None => body.push(literal('[')),
            },
            c => body.push(literal(c)),
        }
    }
    if !double {
        return vec![body];
    }
    let mut prefixed = vec![Piece::Star, literal('/')];
    prefixed.extend(body.iter().cloned());
    vec![body, prefixed]
}

/// Index of the `]` closing a set whose body starts at `start` (a `]` right
/// after `[` or `[!` is a member).
fn class_end(chars: &[char], start: usize) -> Option<usize> {
    let mut j = start;
    if chars.get(j) == Some(&'!') {
        j += 1;
    }
    if chars.get(j) == Some(&']') {
        j += 1;
    }
    (j..chars.len()).find(|&k| chars[k] == ']')
}

/// A set body: leading `!` negates, `x-y` is a range (none when `x > y`).
fn class(body: &[char]) -> Piece {
    let (negated, body) = match body.split_first() {
        Some(('!', rest)) => (true, rest),
        _ => (false, body),
    };
    let mut ranges = Vec::new();
    let mut p = 0;
    while p < body.len() {
        if p + 2 < body.len() && body[p + 1] == '-' {
            let (lo, hi) = (body[p] as u32, body[p + 2] as u32);
            if lo <= hi {
                ranges.push((lo, hi));
            }
            p += 3;
        } else {
            ranges.push((body[p] as u32, body[p] as u32));
            p += 1;
        }
    }
    Piece::Set { ranges, negated }
}

/// Representatives witnesses are spelled with, most readable first.
pub(super) const PREFERRED: &str =
    "xyzabcdefghijklmnopqrstuvw0123456789XYZABCDEFGHIJKLMNOPQRSTUVW_-.";

/// One reachable combination of matching globs and the shortest string
/// reaching it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Class {
    /// `accepts[i]`: glob `i` matches `witness`.
    pub accepts: Vec<bool>,
    /// A shortest string every glob of `accepts` matches and no other does.
    pub witness: String,
}

/// Every combination of the `globs` matching that some string realizes,
/// each with a shortest such string; `None` past [`MAX_STATES`].
///
/// Any boolean question about the globs' languages is a question about
/// these classes: `a` covers `b` when no class has `b` without `a`.
pub fn explore(globs: &[&str]) -> Option<Vec<Class>> {
    let unions: Vec<Vec<&str>> = globs.iter().map(|g| vec![*g]).collect();
    explore_unions(&unions)
}

/// [`explore`] where each entry is the union of its globs (an empty union
/// matches nothing).
pub fn explore_unions(unions: &[Vec<&str>]) -> Option<Vec<Class>> {
    let mut budget = Budget::states(MAX_STATES);
    bounded::explore(unions, Matching::Plain, None, &|_| false, &mut budget).ok()
}

/// A shortest string `b` matches and `a` does not: `Some(None)` when `a`
/// covers `b`, `None` when the pair is too complex to decide.
pub fn witness(a: &str, b: &str) -> Option<Option<String>> {
    let classes = explore(&[a, b])?;
    Some(
        classes
            .into_iter()
            .find(|c| c.accepts[1] && !c.accepts[0])
            .map(|c| c.witness),
    )
}

/// Whether every string `b` matches, `a` matches too (`None`: too complex).
pub fn covers(a: &str, b: &str) -> Option<bool> {
    witness(a, b).map(|w| w.is_none())
}

/// Whether `a` and `b` match exactly the same strings.
pub fn equivalent(a: &str, b: &str) -> Option<bool> {
    let classes = explore(&[a, b])?;
    Some(classes.iter().all(|c| c.accepts[0] == c.accepts[1]))
}

/// A shortest string both match: `Some(None)` when none does, `None` when
/// too complex.
pub fn intersection(a: &str, b: &str) -> Option<Option<String>> {
    let classes = explore(&[a, b])?;
    Some(
        classes
            .into_iter()
            .find(|c| c.accepts[0] && c.accepts[1])
            .map(|c| c.witness),
    )
}

/// Whether some string matches both (`None`: too complex).
pub fn intersects(a: &str, b: &str) -> Option<bool> {
    intersection(a, b).map(|w| w.is_some())
}
