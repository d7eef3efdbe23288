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

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};

/// Most DFA states one exploration may build before it gives up: a glob
/// set this tangled is reported as too complex, never answered wrongly.
pub const MAX_STATES: usize = 200_000;

/// One piece of a glob before the alphabet is known.
#[derive(Debug, Clone)]
enum Piece {
    Star,
    /// Inclusive code-point ranges; `negated` takes the complement.
    Set {
        ranges: Vec<(u32, u32)>,
        negated: bool,
    },
}

/// One step of a compiled glob: a star, or a set of alphabet symbols.
#[derive(Debug, Clone)]
enum Atom {
    Star,
    Set(Vec<bool>),
}

/// Parses `glob` as [`crate::fnmatch::to_regex`] reads it. A leading `**/`
/// (`(.*/)?` there) becomes two alternatives: the rest, and `*/` + the rest.
fn parse(glob: &str) -> Vec<Vec<Piece>> {
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

/// One past the last Unicode scalar value.
const END: u32 = 0x11_0000;

/// The shared alphabet: interval starts and a representative of each.
#[derive(Debug)]
struct Alphabet {
    starts: Vec<u32>,
    reps: Vec<char>,
}

impl Alphabet {
    fn new(pieces: &[&Piece]) -> Self {
        let mut bounds = BTreeSet::from([0u32]);
        for piece in pieces {
            if let Piece::Set { ranges, .. } = piece {
                for &(lo, hi) in ranges {
                    bounds.insert(lo);
                    bounds.insert(hi + 1);
                }
            }
        }
        bounds.insert(END);
        let bounds: Vec<u32> = bounds.into_iter().collect();
        let (mut starts, mut reps) = (Vec::new(), Vec::new());
        for w in bounds.windows(2) {
            // Intervals of surrogates only hold no character: no symbol.
            if let Some(rep) = representative(w[0], w[1]) {
                starts.push(w[0]);
                reps.push(rep);
            }
        }
        Self { starts, reps }
    }

    fn symbols(&self, piece: &Piece) -> Atom {
        match piece {
            Piece::Star => Atom::Star,
            Piece::Set { ranges, negated } => Atom::Set(
                self.starts
                    .iter()
                    .map(|&s| ranges.iter().any(|&(lo, hi)| lo <= s && s <= hi) != *negated)
                    .collect(),
            ),
        }
    }
}

/// Representatives witnesses are spelled with, most readable first.
const PREFERRED: &str = "xyzabcdefghijklmnopqrstuvw0123456789XYZABCDEFGHIJKLMNOPQRSTUVW_-.";

/// A readable character of `[lo, hi)`, if it holds any.
fn representative(lo: u32, hi: u32) -> Option<char> {
    PREFERRED
        .chars()
        .find(|&c| (lo..hi).contains(&(c as u32)))
        .or_else(|| (lo..hi).find_map(char::from_u32))
}

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
    let parsed: Vec<Vec<Vec<Piece>>> = unions
        .iter()
        .map(|u| u.iter().flat_map(|g| parse(g)).collect())
        .collect();
    let all: Vec<&Piece> = parsed.iter().flatten().flatten().collect();
    let alphabet = Alphabet::new(&all);
    // One NFA state per position of each sequence (alternative of an entry).
    let mut entry_of: Vec<usize> = Vec::new();
    let mut step_of: Vec<Step> = Vec::new();
    let mut sets: Vec<Vec<bool>> = Vec::new();
    let mut starts: Vec<u32> = Vec::new();
    for (entry, alternatives) in parsed.iter().enumerate() {
        for seq in alternatives {
            starts.push(step_of.len() as u32);
            for piece in seq {
                entry_of.push(entry);
                step_of.push(match alphabet.symbols(piece) {
                    Atom::Star => Step::Star,
                    Atom::Set(bits) => {
                        sets.push(bits);
                        Step::Set(sets.len() - 1)
                    }
                });
            }
            // The end of a sequence ending in a star matches every
            // extension: it loops, and the entry's other states no longer
            // matter (they are dropped), which keeps `*x*` globs cheap.
            entry_of.push(entry);
            step_of.push(Step::End {
                universal: matches!(seq.last(), Some(Piece::Star)),
            });
        }
    }
    let (sets, reps) = compress(sets, &alphabet.reps);
    let close = |set: &mut Vec<u32>, settled: &mut Vec<Option<u32>>| {
        let mut k = 0;
        while k < set.len() {
            if step_of[set[k] as usize] == Step::Star {
                set.push(set[k] + 1);
            }
            k += 1;
        }
        set.sort_unstable();
        set.dedup();
        settled.iter_mut().for_each(|s| *s = None);
        let mut any = false;
        for &id in set.iter() {
            if step_of[id as usize] == (Step::End { universal: true }) {
                settled[entry_of[id as usize]].get_or_insert(id);
                any = true;
            }
        }
        if any {
            set.retain(|&id| settled[entry_of[id as usize]].is_none_or(|keep| keep == id));
        }
    };
    let accepts = |set: &[u32]| -> Vec<bool> {
        let mut out = vec![false; unions.len()];
        for &id in set {
            if matches!(step_of[id as usize], Step::End { .. }) {
                out[entry_of[id as usize]] = true;
            }
        }
        out
    };

    let mut settled = vec![None; unions.len()];
    let mut start = starts;
    close(&mut start, &mut settled);
    let mut index: HashMap<Vec<u32>, usize> = HashMap::from([(start.clone(), 0)]);
    let mut parent: Vec<Option<(usize, usize)>> = vec![None];
    let mut queue = VecDeque::from([(start, 0usize)]);
    let mut seen_classes = HashSet::new();
    let mut classes = Vec::new();
    let mut next = Vec::new();
    while let Some((set, id)) = queue.pop_front() {
        let acc = accepts(&set);
        if seen_classes.insert(acc.clone()) {
            classes.push(Class {
                accepts: acc,
                witness: spell(&parent, &reps, id),
            });
        }
        for (sym, _) in reps.iter().enumerate() {
            next.clear();
            for &state in &set {
                match step_of[state as usize] {
                    Step::Star | Step::End { universal: true } => next.push(state),
                    Step::Set(i) if sets[i][sym] => next.push(state + 1),
                    _ => {}
                }
            }
            close(&mut next, &mut settled);
            if index.contains_key(&next) {
                continue;
            }
            if index.len() >= MAX_STATES {
                return None;
            }
            let next_id = parent.len();
            parent.push(Some((id, sym)));
            index.insert(next.clone(), next_id);
            queue.push_back((next.clone(), next_id));
        }
    }
    Some(classes)
}

/// What a state does on a symbol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Star,
    Set(usize),
    End { universal: bool },
}

/// Merges symbols no set tells apart (most gaps between the characters
/// the globs name), keeping the most readable representative of each.
fn compress(sets: Vec<Vec<bool>>, reps: &[char]) -> (Vec<Vec<bool>>, Vec<char>) {
    let rank = |c: char| PREFERRED.find(c).unwrap_or(usize::MAX);
    let mut groups: HashMap<Vec<bool>, usize> = HashMap::new();
    let mut keep: Vec<usize> = Vec::new();
    for (sym, &rep) in reps.iter().enumerate() {
        let signature: Vec<bool> = sets.iter().map(|bits| bits[sym]).collect();
        match groups.get(&signature) {
            Some(&k) => {
                if rank(rep) < rank(reps[keep[k]]) {
                    keep[k] = sym;
                }
            }
            None => {
                groups.insert(signature, keep.len());
                keep.push(sym);
            }
        }
    }
    let sets = sets
        .into_iter()
        .map(|bits| keep.iter().map(|&s| bits[s]).collect())
        .collect();
    (sets, keep.iter().map(|&s| reps[s]).collect())
}

/// The string the walk took to reach state `id`.
fn spell(parent: &[Option<(usize, usize)>], reps: &[char], mut id: usize) -> String {
    let mut out = Vec::new();
    while let Some((from, sym)) = parent[id] {
        out.push(reps[sym]);
        id = from;
    }
    out.iter().rev().collect()
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
