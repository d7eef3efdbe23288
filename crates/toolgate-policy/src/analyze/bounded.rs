//! The automaton every analysis question is answered with: one subset
//! construction over a union of globs ([`super::glob_lang`] reads their
//! syntax), walked breadth first so each reachable combination of
//! matching unions comes with a shortest text. It runs within a
//! [`Budget`] (admission sizes every allocation by caps it checked first
//! and shares one budget and deadline across a profile; `toolgate
//! analyze` caps only the states) and in one of two [`Matching`]s:
//! the plain glob languages, or what the evaluator's
//! `OrderedGlobs::first_match` matches — the text itself or, when the
//! text holds an uppercase character, its `to_lowercase()` copy.
//!
//! Under [`Matching::Evaluator`] each union runs on two tracks: one reads
//! the text, the other the text's lowercase image (a character's
//! `to_lowercase`, one to three characters); a flag records whether an
//! uppercase character was read. A union matches when the plain track
//! ends, or the flag is set and the lowered track ends. The alphabet is
//! the plain intervals of the globs' bounds, refined by each cased
//! character's image.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::OnceLock;
use std::time::Instant;

pub(crate) use super::glob_lang::Class;
use super::glob_lang::{PREFERRED, Piece, parse};

/// Why an exploration stopped without an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    /// The work budget, or the cap on states, is spent.
    Budget,
    /// The deadline passed.
    Deadline,
    /// A glob tells `σ` from `ς`, and `str::to_lowercase` picks between
    /// them by context (final sigma), which the tracks do not model.
    FinalSigma,
}

/// What globs match.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Matching {
    /// The glob languages as `fnmatch` defines them.
    Plain,
    /// As the evaluator matches them: the text or its lowercase copy.
    Evaluator,
}

/// What an exploration may spend; admission shares one by every question
/// of a profile.
#[derive(Debug)]
pub(crate) struct Budget {
    /// Work units left: one per (state, symbol, NFA position) step.
    pub(crate) work: u64,
    /// Most `u32`s the stored DFA states of one question may hold (each
    /// stored twice: index key and queue), which bounds its memory.
    pub(crate) stored: usize,
    /// Most DFA states of one question.
    pub(crate) states: usize,
    /// When to give up, if ever.
    pub(crate) deadline: Option<Instant>,
}

impl Budget {
    /// No cap but `states` DFA states per question: `toolgate analyze`,
    /// which a person runs and waits for.
    pub(crate) fn states(states: usize) -> Self {
        Self {
            work: u64::MAX,
            stored: usize::MAX,
            states,
            deadline: None,
        }
    }
}

/// Every class of `unions` as the evaluator matches them, for `toolgate
/// analyze` (at most [`super::glob_lang::MAX_STATES`] states).
pub(crate) fn explore_evaluated(unions: &[Vec<&str>]) -> Result<Vec<Class>, Stop> {
    let mut budget = Budget::states(super::glob_lang::MAX_STATES);
    explore(unions, Matching::Evaluator, None, &|_| false, &mut budget)
}

/// Why the full analysis could not judge a tool, in a sentence.
pub(crate) fn incomplete(stop: Stop) -> &'static str {
    match stop {
        Stop::FinalSigma => {
            "a glob tells σ from ς, which the evaluator's lowercase copy picks by context \
             (final sigma): the globs of this tool cannot be compared exactly"
        }
        Stop::Budget | Stop::Deadline => {
            "the globs of this tool are too intricate to compare exactly"
        }
    }
}

/// Whether `glob` matches `text` as the evaluator's glob lists do: the
/// text, or its lowercase copy when it has an uppercase character.
pub(crate) fn evaluator_matches(glob: &str, text: &str) -> bool {
    let Ok(m) = crate::fnmatch::Matcher::new(glob) else {
        return false;
    };
    m.is_match(text) || (text.chars().any(char::is_uppercase) && m.is_match(&text.to_lowercase()))
}

/// Whether `glob` has a set holding one of `σ` and `ς` but not the other:
/// the globs of a question tell them apart (and [`Stop::FinalSigma`]
/// stops it) exactly when one of them does, so this names the glob at
/// fault.
pub(crate) fn tells_sigmas_apart(glob: &str) -> bool {
    parse(glob).iter().flatten().any(|piece| match piece {
        Piece::Set { ranges, .. } => {
            let holds = |c: char| {
                ranges
                    .iter()
                    .any(|&(lo, hi)| lo <= c as u32 && c as u32 <= hi)
            };
            holds('σ') != holds('ς')
        }
        Piece::Star => false,
    })
}

/// A character whose lowercase image is not itself, or that is
/// uppercase (it turns lowercasing on), with its image.
struct Cased {
    c: char,
    upper: bool,
    lower: Vec<char>,
}

/// Every cased character, computed once per process (~1,500 entries).
fn cased() -> &'static [Cased] {
    static CASED: OnceLock<Vec<Cased>> = OnceLock::new();
    CASED.get_or_init(|| {
        (0..0x11_0000u32)
            .filter_map(char::from_u32)
            .filter_map(|c| {
                let lower: Vec<char> = c.to_lowercase().collect();
                let upper = c.is_uppercase();
                (upper || lower != [c]).then_some(Cased { c, upper, lower })
            })
            .collect()
    })
}

fn is_cased(c: char) -> bool {
    cased().binary_search_by_key(&c, |k| k.c).is_ok()
}

fn rank(c: char) -> usize {
    PREFERRED.find(c).unwrap_or(usize::MAX)
}

/// One input symbol: the plain interval its characters fall in, whether
/// they are uppercase, and the plain intervals of their lowercase image
/// (empty under [`Matching::Plain`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    plain: u32,
    upper: bool,
    lower: Vec<u32>,
}

/// What an NFA position does on a symbol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Star,
    Set(usize),
    /// The end of a sequence; one ending in a star matches every
    /// extension (`universal`), and its union's other positions no longer
    /// matter (they are dropped), which keeps `*x*` globs cheap.
    End {
        universal: bool,
    },
}

/// The union of tracks `(union, lowered)`: `2 * union + lowered`.
type Track = u32;

/// Every combination of `unions` matching that some text realizes (an
/// empty union matches nothing), each with a shortest such text, as
/// `matching` says globs match, within `budget`. Admission has capped the
/// globs' number, length and distinct characters, which bounds every
/// allocation made before the walk; the walk's own states are counted
/// against `budget.stored` and `budget.states`.
///
/// With a `focus`, only texts `unions[focus]` may still match are
/// extended (the caller asks about that union's texts alone); the walk
/// ends early once a class satisfying `enough` is found. The classes are
/// then partial.
pub(crate) fn explore(
    unions: &[Vec<&str>],
    matching: Matching,
    focus: Option<usize>,
    enough: &dyn Fn(&[bool]) -> bool,
    budget: &mut Budget,
) -> Result<Vec<Class>, Stop> {
    let cased_too = matching == Matching::Evaluator;
    let parsed: Vec<Vec<Vec<Piece>>> = unions
        .iter()
        .map(|u| u.iter().flat_map(|g| parse(g)).collect())
        .collect();
    // Plain intervals: cut at every bound a set names.
    let mut bounds = vec![0u32, 0x11_0000];
    for piece in parsed.iter().flatten().flatten() {
        if let Piece::Set { ranges, .. } = piece {
            for &(lo, hi) in ranges {
                bounds.push(lo);
                bounds.push(hi + 1);
            }
        }
    }
    bounds.sort_unstable();
    bounds.dedup();
    let plain_count = bounds.len() - 1;
    let interval_of = |c: char| bounds.partition_point(|&b| b <= c as u32) - 1;
    // NFA positions: per union, its plain track then (matched as the
    // evaluator does) its lowered track, which reads the same sets.
    let mut sets: Vec<Vec<bool>> = Vec::new();
    let mut step_of: Vec<Step> = Vec::new();
    let mut track_of: Vec<Track> = Vec::new();
    let mut starts: Vec<u32> = Vec::new();
    let tracks: &[u32] = if cased_too { &[0, 1] } else { &[0] };
    for (u, alternatives) in parsed.iter().enumerate() {
        let first_set = sets.len();
        for &lowered in tracks {
            let mut next_set = first_set;
            for seq in alternatives {
                starts.push(step_of.len() as u32);
                for piece in seq {
                    track_of.push(2 * u as u32 + lowered);
                    step_of.push(match piece {
                        Piece::Star => Step::Star,
                        Piece::Set { ranges, negated } => {
                            if lowered == 0 {
                                sets.push(
                                    bounds[..plain_count]
                                        .iter()
                                        .map(|&s| {
                                            ranges.iter().any(|&(lo, hi)| lo <= s && s <= hi)
                                                != *negated
                                        })
                                        .collect(),
                                );
                            }
                            next_set += 1;
                            Step::Set(next_set - 1)
                        }
                    });
                }
                track_of.push(2 * u as u32 + lowered);
                step_of.push(Step::End {
                    universal: matches!(seq.last(), Some(Piece::Star)),
                });
            }
        }
    }
    // Intervals no set tells apart are one class, named by its first.
    let mut class_rep: HashMap<Vec<bool>, u32> = HashMap::new();
    let rep_of: Vec<u32> = (0..plain_count)
        .map(|p| {
            let signature: Vec<bool> = sets.iter().map(|s| s[p]).collect();
            *class_rep.entry(signature).or_insert(p as u32)
        })
        .collect();
    drop(class_rep);
    let plain_of = |c: char| rep_of[interval_of(c)];
    // Final sigma: `Σ` lowers to `σ` or `ς` by context; exact only when
    // no set tells them apart.
    if cased_too && plain_of('σ') != plain_of('ς') {
        return Err(Stop::FinalSigma);
    }
    // Symbols: per class its plain characters (uncased ones, when cased
    // characters are symbols of their own), plus each cased character's
    // key; one readable representative each. Surrogates are no symbol.
    let mut symbols: HashMap<Key, char> = HashMap::new();
    let mut offer = |key: Key, c: char| {
        let rep = symbols.entry(key).or_insert(c);
        if (rank(c), c) < (rank(*rep), *rep) {
            *rep = c;
        }
    };
    let plain = |c: char| !cased_too || !is_cased(c);
    for p in 0..plain_count {
        let (lo, hi) = (bounds[p], bounds[p + 1]);
        let preferred = PREFERRED
            .chars()
            .find(|&c| (lo..hi).contains(&(c as u32)) && plain(c));
        let any = preferred.or_else(|| (lo..hi).filter_map(char::from_u32).find(|&c| plain(c)));
        if let Some(c) = any {
            let p = rep_of[p];
            let lower = if cased_too { vec![p] } else { Vec::new() };
            offer(
                Key {
                    plain: p,
                    upper: false,
                    lower,
                },
                c,
            );
        }
    }
    for k in cased().iter().filter(|_| cased_too) {
        let key = Key {
            plain: plain_of(k.c),
            upper: k.upper,
            lower: k.lower.iter().map(|&c| plain_of(c)).collect(),
        };
        offer(key, k.c);
    }
    let mut symbols: Vec<(Key, char)> = symbols.into_iter().collect();
    symbols.sort_by_key(|(_, c)| (rank(*c), *c));
    let walk = Walk {
        unions: unions.len(),
        step_of: &step_of,
        track_of: &track_of,
        sets: &sets,
        symbols: &symbols,
        focus: focus.map(|f| f as Track),
        enough,
    };
    walk.run(starts, budget)
}

/// The automaton one question walks.
struct Walk<'a> {
    unions: usize,
    step_of: &'a [Step],
    track_of: &'a [Track],
    sets: &'a [Vec<bool>],
    symbols: &'a [(Key, char)],
    focus: Option<Track>,
    enough: &'a dyn Fn(&[bool]) -> bool,
}

impl Walk<'_> {
    /// The subset construction and breadth-first walk.
    fn run(&self, starts: Vec<u32>, budget: &mut Budget) -> Result<Vec<Class>, Stop> {
        let Walk {
            unions,
            step_of,
            track_of,
            sets,
            symbols,
            focus,
            enough,
        } = *self;
        // The flag "an uppercase character was read" is position `flag`.
        let flag = step_of.len() as u32;
        let mut settled: Vec<Option<u32>> = vec![None; 2 * unions];
        let close = |set: &mut Vec<u32>, settled: &mut Vec<Option<u32>>| {
            let mut k = 0;
            while k < set.len() {
                let id = set[k];
                if id != flag && step_of[id as usize] == Step::Star {
                    set.push(id + 1);
                }
                k += 1;
            }
            set.sort_unstable();
            set.dedup();
            settled.iter_mut().for_each(|s| *s = None);
            let mut any = false;
            for &id in set.iter() {
                if id != flag && step_of[id as usize] == (Step::End { universal: true }) {
                    settled[track_of[id as usize] as usize].get_or_insert(id);
                    any = true;
                }
            }
            if any {
                set.retain(|&id| {
                    id == flag
                        || settled[track_of[id as usize] as usize].is_none_or(|keep| keep == id)
                });
            }
        };
        let advance = |from: &[u32], sym: u32, into: &mut Vec<u32>| {
            for &state in from {
                match step_of[state as usize] {
                    Step::Star | Step::End { universal: true } => into.push(state),
                    Step::Set(i) if sets[i][sym as usize] => into.push(state + 1),
                    _ => {}
                }
            }
        };
        let accepts = |set: &[u32]| -> Vec<bool> {
            let upper = set.last() == Some(&flag);
            let mut out = vec![false; unions];
            for &id in set {
                if id != flag
                    && matches!(step_of[id as usize], Step::End { .. })
                    && (track_of[id as usize] % 2 == 0 || upper)
                {
                    out[track_of[id as usize] as usize / 2] = true;
                }
            }
            out
        };
        let mut start = starts;
        close(&mut start, &mut settled);
        let mut stored = 2 * start.len();
        let mut index: HashMap<Vec<u32>, usize> = HashMap::from([(start.clone(), 0)]);
        let mut parent: Vec<Option<(usize, usize)>> = vec![None];
        let mut queue = VecDeque::from([(start, 0usize)]);
        let mut seen_classes = HashSet::new();
        let mut classes = Vec::new();
        let (mut plain, mut lowered, mut next) = (Vec::new(), Vec::new(), Vec::new());
        while let Some((set, id)) = queue.pop_front() {
            if id % 64 == 0 && budget.deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(Stop::Deadline);
            }
            let acc = accepts(&set);
            if seen_classes.insert(acc.clone()) {
                let done = enough(&acc);
                classes.push(Class {
                    accepts: acc,
                    witness: spell(&parent, symbols, id),
                });
                if done {
                    return Ok(classes);
                }
            }
            // No text through here can match the focus union any more.
            if let Some(focus) = focus
                && !set
                    .iter()
                    .any(|&s| s != flag && track_of[s as usize] / 2 == focus)
            {
                continue;
            }
            let upper_now = set.last() == Some(&flag);
            let (tracks_plain, tracks_lower): (Vec<u32>, Vec<u32>) = set
                .iter()
                .copied()
                .filter(|&s| s != flag)
                .partition(|&s| track_of[s as usize] % 2 == 0);
            for (sym, (key, _)) in symbols.iter().enumerate() {
                let cost = (set.len() * (1 + key.lower.len())) as u64;
                budget.work = budget.work.checked_sub(cost).ok_or(Stop::Budget)?;
                next.clear();
                advance(&tracks_plain, key.plain, &mut next);
                plain.clear();
                plain.extend_from_slice(&tracks_lower);
                for &p in &key.lower {
                    lowered.clear();
                    advance(&plain, p, &mut lowered);
                    close(&mut lowered, &mut settled);
                    std::mem::swap(&mut plain, &mut lowered);
                }
                next.extend_from_slice(&plain);
                if upper_now || key.upper {
                    next.push(flag);
                }
                close(&mut next, &mut settled);
                if index.contains_key(&next) {
                    continue;
                }
                stored += 2 * next.len() + 2;
                if stored > budget.stored || parent.len() >= budget.states {
                    return Err(Stop::Budget);
                }
                let next_id = parent.len();
                parent.push(Some((id, sym)));
                index.insert(next.clone(), next_id);
                queue.push_back((next.clone(), next_id));
            }
        }
        Ok(classes)
    }
}

fn spell(parent: &[Option<(usize, usize)>], symbols: &[(Key, char)], mut id: usize) -> String {
    let mut out = Vec::new();
    while let Some((from, sym)) = parent[id] {
        out.push(symbols[sym].1);
        id = from;
    }
    out.iter().rev().collect()
}
