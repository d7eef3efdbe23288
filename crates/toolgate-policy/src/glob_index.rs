//! An index over an ordered list of fnmatch globs, so that finding the
//! first glob matching a text costs about the same for 50,000 globs as for
//! 100 (issue #45 part 4).
//!
//! Each glob is sorted at compile time by what a matching text must hold,
//! read from the pattern alone (the shape of ripgrep's globset strategies):
//!
//! - no wildcard: the text *is* the glob (one hash lookup);
//! - `abc*` / `*abc`: the text starts / ends with `abc` (a hash lookup at
//!   each distinct key length, by a rolling hash, so one pass over the text);
//! - `*`: every text;
//! - anything else is checked by its own [`Matcher`], but only when the text
//!   holds a literal the glob requires: its leading or trailing literal (in
//!   the same prefix / suffix tables) or, failing that, a 3-byte piece of
//!   one of its literal runs (a gram table); globs with no such literal are
//!   tried one by one.
//!
//! Every table keeps, per key, the lowest glob index, and candidates are
//! checked in index order, stopping at the best found so far: the answer is
//! the first glob in policy order, as a linear search would give.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crate::compile::compile_glob;
use crate::error::PolicyError;
use crate::fnmatch::Matcher;

/// Lists this short are searched one glob after another: as fast, and
/// nothing to build.
const LINEAR_MAX: usize = 16;

/// An ordered list of fnmatch globs; the first one that matches is the
/// first rule in policy order.
#[derive(Debug, Clone)]
pub(crate) struct OrderedGlobs {
    matchers: Vec<Matcher>,
    /// Parallel to `matchers`: the `matched_rule` label of each glob.
    labels: Vec<String>,
    /// `None` for a list of at most [`LINEAR_MAX`] globs.
    index: Option<GlobIndex>,
}

impl OrderedGlobs {
    pub(crate) fn build(entries: Vec<(String, String, String)>) -> Result<Self, PolicyError> {
        // entries: (field path, glob, label)
        let mut matchers = Vec::with_capacity(entries.len());
        let mut labels = Vec::with_capacity(entries.len());
        for (field, glob, _) in &entries {
            matchers.push(compile_glob(field, glob)?);
        }
        let index = (entries.len() > LINEAR_MAX)
            .then(|| GlobIndex::build(entries.iter().map(|(_, glob, _)| glob.as_str())));
        for (_, _, label) in entries {
            labels.push(label);
        }
        Ok(Self {
            matchers,
            labels,
            index,
        })
    }

    /// Index of the first glob matching `text` or its lowercase copy.
    pub(crate) fn first_match(&self, text: &str) -> Option<usize> {
        #[cfg(test)]
        if LINEAR_ONLY.get() {
            return self.first_match_linear(text);
        }
        match &self.index {
            Some(index) => index.first_match(&self.matchers, text),
            None => self.first_match_linear(text),
        }
    }

    /// [`Self::first_match`] by trying every glob in turn: the meaning the
    /// index must keep, and what the tests hold it to.
    pub(crate) fn first_match_linear(&self, text: &str) -> Option<usize> {
        if self.matchers.is_empty() {
            return None;
        }
        let lower = text
            .chars()
            .any(char::is_uppercase)
            .then(|| text.to_lowercase());
        self.matchers
            .iter()
            .position(|m| m.is_match(text) || lower.as_deref().is_some_and(|l| m.is_match(l)))
    }

    pub(crate) fn label(&self, index: usize) -> &str {
        &self.labels[index]
    }

    pub(crate) fn len(&self) -> usize {
        self.labels.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }
}

#[cfg(test)]
thread_local! {
    /// Set by tests to evaluate whole profiles with the linear search.
    pub(crate) static LINEAR_ONLY: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Bytes in one gram of the gram table.
const GRAM: usize = 3;

/// The index of one ordered glob list; the matchers themselves stay with
/// the caller, parallel to the indices here.
#[derive(Debug, Clone, Default)]
pub(crate) struct GlobIndex {
    exact: HashMap<Box<str>, u32>,
    /// Lowest index of a glob matching every text.
    any: Option<u32>,
    prefixes: Affixes,
    /// Keys read backwards.
    suffixes: Affixes,
    grams: Grams,
    /// Globs with no usable literal, in index order.
    scan: Vec<u32>,
}

/// What a glob requires of every text it matches.
#[derive(Debug, PartialEq)]
enum Shape<'a> {
    /// No wildcard: the text is this.
    Exact(&'a str),
    /// Only stars: every text.
    Any,
    /// `abc*`: starts with this, nothing else asked.
    Prefix(&'a str),
    /// `*abc`: ends with this, nothing else asked.
    Suffix(&'a str),
    /// The rest: literal runs every match contains, in order; `head` and
    /// `tail` say whether the first run starts the text and the last ends it.
    Other {
        runs: Vec<&'a str>,
        head: bool,
        tail: bool,
    },
}

/// Reads `pattern` as [`crate::fnmatch::to_regex`] does: `*`, `?`, a
/// closed `[...]` and a leading `**/` are wildcards, all else is literal.
/// (Steps by byte: those are ASCII, never inside a multibyte character.)
fn shape(pattern: &str) -> Shape<'_> {
    let bytes = pattern.as_bytes();
    let lead = pattern.starts_with("**/");
    let (mut i, mut run_start) = if lead { (3, 3) } else { (0, 0) };
    let (mut wild, mut only_stars, mut head) = (lead, !lead, false);
    let mut runs = Vec::new();
    while i < bytes.len() {
        let wildcard_end = match bytes[i] {
            b'*' | b'?' => Some(i + 1),
            b'[' => class_end(pattern, i + 1).map(|end| end + 1),
            _ => None,
        };
        let Some(end) = wildcard_end else {
            i += 1;
            continue;
        };
        wild = true;
        only_stars &= bytes[i] == b'*';
        if run_start < i {
            head |= runs.is_empty() && run_start == 0;
            runs.push(&pattern[run_start..i]);
        }
        (i, run_start) = (end, end);
    }
    if !wild {
        return Shape::Exact(pattern);
    }
    let tail = run_start < bytes.len();
    if tail {
        head |= runs.is_empty() && run_start == 0;
        runs.push(&pattern[run_start..]);
    }
    match (only_stars, runs.as_slice(), head, tail) {
        (true, [], _, _) => Shape::Any,
        (true, [p], true, false) => Shape::Prefix(p),
        (true, [s], false, true) => Shape::Suffix(s),
        _ => Shape::Other { runs, head, tail },
    }
}

/// Byte offset of the `]` closing a set whose body starts at `start`, as
/// `fnmatch::class_end` finds it: a `]` right after `[` or `[!` is a member.
fn class_end(pattern: &str, start: usize) -> Option<usize> {
    let mut j = start;
    if pattern[j..].starts_with('!') {
        j += 1;
    }
    if pattern[j..].starts_with(']') {
        j += 1;
    }
    pattern[j..].find(']').map(|k| j + k)
}

impl GlobIndex {
    /// Indexes `patterns` (glob `i` is `matchers[i]` of the caller).
    pub(crate) fn build<'a>(patterns: impl IntoIterator<Item = &'a str>) -> Self {
        let mut index = Self {
            suffixes: Affixes {
                backward: true,
                ..Affixes::default()
            },
            ..Self::default()
        };
        let mut for_grams: Vec<(u32, Vec<&str>)> = Vec::new();
        for (i, pattern) in patterns.into_iter().enumerate() {
            let i = u32::try_from(i).expect("fewer than 2^32 globs");
            match shape(pattern) {
                Shape::Exact(text) => {
                    index.exact.entry(text.into()).or_insert(i);
                }
                Shape::Any => {
                    index.any.get_or_insert(i);
                }
                Shape::Prefix(p) => index.prefixes.add(p.as_bytes(), i, false),
                Shape::Suffix(s) => index.suffixes.add(s.as_bytes(), i, false),
                Shape::Other { runs, head, tail } => {
                    // The longest anchored literal if it is long enough to
                    // be selective, else a gram, else any anchored literal.
                    let prefix = if head { runs[0].len() } else { 0 };
                    let suffix = if tail { runs[runs.len() - 1].len() } else { 0 };
                    let has_gram = runs.iter().any(|r| r.len() >= GRAM);
                    let anchored = prefix.max(suffix);
                    if anchored >= GRAM || (!has_gram && anchored > 0) {
                        if prefix >= suffix {
                            index.prefixes.add(runs[0].as_bytes(), i, true);
                        } else {
                            index.suffixes.add(runs[runs.len() - 1].as_bytes(), i, true);
                        }
                    } else if has_gram {
                        for_grams.push((i, runs));
                    } else {
                        index.scan.push(i);
                    }
                }
            }
        }
        index.grams = Grams::build(&for_grams);
        index
    }

    /// Index of the first glob matching `text` or, when `text` has an
    /// uppercase letter, its lowercase copy.
    pub(crate) fn first_match(&self, matchers: &[Matcher], text: &str) -> Option<usize> {
        let mut best = None;
        self.first_in(matchers, text, &mut best);
        if text.chars().any(char::is_uppercase) {
            self.first_in(matchers, &text.to_lowercase(), &mut best);
        }
        best.map(|i| i as usize)
    }

    /// Lowers `best` to the first glob matching `text` exactly, if earlier.
    fn first_in(&self, matchers: &[Matcher], text: &str, best: &mut Option<u32>) {
        offer(best, self.any);
        offer(best, self.exact.get(text).copied());
        let bytes = text.as_bytes();
        let (forward, backward) = (bytes.iter().copied(), bytes.iter().rev().copied());
        self.prefixes
            .probe(forward, |n| &bytes[..n], matchers, text, best);
        self.suffixes.probe(
            backward,
            |n| &bytes[bytes.len() - n..],
            matchers,
            text,
            best,
        );
        self.grams.probe(bytes, matchers, text, best);
        let found = first_verified(&self.scan, matchers, text, *best);
        offer(best, found);
    }
}

fn offer(best: &mut Option<u32>, candidate: Option<u32>) {
    if let Some(i) = candidate
        && best.is_none_or(|b| i < b)
    {
        *best = Some(i);
    }
}

/// The first of `candidates` (ascending) before `best` whose matcher
/// matches `text`.
fn first_verified(
    candidates: &[u32],
    matchers: &[Matcher],
    text: &str,
    best: Option<u32>,
) -> Option<u32> {
    candidates
        .iter()
        .copied()
        .take_while(|&i| best.is_none_or(|b| i < b))
        .find(|&i| matchers[i as usize].is_match(text))
}

/// Literal prefixes (or suffixes, hashed backwards) of globs, keyed by a
/// rolling hash of key and length, so one pass over the text probes every
/// key length present.
#[derive(Debug, Clone, Default)]
struct Affixes {
    backward: bool,
    /// Hash to the first of its affixes in `affixes`.
    by_hash: HashMap<u64, u32, BuildHasherDefault<Prehashed>>,
    affixes: Vec<Affix>,
    /// `lengths[n]`: some key is `n` bytes long.
    lengths: Vec<bool>,
}

#[derive(Debug, Clone)]
struct Affix {
    /// In text order, whichever end it anchors.
    key: Box<[u8]>,
    /// Lowest index of a glob that is this affix and a star, nothing more.
    whole: Option<u32>,
    /// Ascending indices of globs asking more than this affix.
    partial: Vec<u32>,
    /// The next affix with the same hash (a collision), if any.
    next: Option<u32>,
}

impl Affixes {
    fn add(&mut self, key: &[u8], index: u32, partial: bool) {
        let hash = if self.backward {
            key_hash(key.iter().rev().copied())
        } else {
            key_hash(key.iter().copied())
        };
        if self.lengths.len() <= key.len() {
            self.lengths.resize(key.len() + 1, false);
        }
        self.lengths[key.len()] = true;
        let new = u32::try_from(self.affixes.len()).expect("fewer than 2^32 globs");
        let mut at = *self.by_hash.entry(hash).or_insert(new);
        while at != new && *self.affixes[at as usize].key != *key {
            match self.affixes[at as usize].next {
                Some(next) => at = next,
                None => {
                    self.affixes[at as usize].next = Some(new);
                    at = new;
                }
            }
        }
        if at == new {
            self.affixes.push(Affix {
                key: key.into(),
                whole: None,
                partial: Vec::new(),
                next: None,
            });
        }
        let affix = &mut self.affixes[at as usize];
        if partial {
            affix.partial.push(index);
        } else {
            affix.whole.get_or_insert(index);
        }
    }

    /// Offers the globs whose key is the text's first (or last) `n` bytes,
    /// for every key length `n`; `bytes` reads the text from that end.
    fn probe<'t>(
        &self,
        bytes: impl Iterator<Item = u8>,
        key_at: impl Fn(usize) -> &'t [u8],
        matchers: &[Matcher],
        text: &str,
        best: &mut Option<u32>,
    ) {
        let mut hash = FNV_OFFSET;
        for (n, byte) in (1..self.lengths.len()).zip(bytes) {
            hash = (hash ^ u64::from(byte)).wrapping_mul(FNV_PRIME);
            if !self.lengths[n] {
                continue;
            }
            let mut next = self.by_hash.get(&finish(hash, n)).copied();
            while let Some(at) = next {
                let affix = &self.affixes[at as usize];
                if *affix.key == *key_at(n) {
                    offer(best, affix.whole);
                    let found = first_verified(&affix.partial, matchers, text, *best);
                    offer(best, found);
                }
                next = affix.next;
            }
        }
    }
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a over `bytes`, then [`finish`]: what [`Affixes::probe`] computes
/// one byte at a time.
fn key_hash(bytes: impl Iterator<Item = u8>) -> u64 {
    let mut n = 0;
    let hash = bytes.fold(FNV_OFFSET, |h, b| {
        n += 1;
        (h ^ u64::from(b)).wrapping_mul(FNV_PRIME)
    });
    finish(hash, n)
}

/// Mixes the length in and spreads the bits (FNV's low bits are weak).
fn finish(hash: u64, len: usize) -> u64 {
    let mut x = hash ^ (len as u64).rotate_left(32);
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^ (x >> 33)
}

/// A hasher for keys that are already hashes.
#[derive(Debug, Default)]
struct Prehashed(u64);

impl Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(FNV_PRIME);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// Globs filed under one 3-byte piece of a literal they require, the piece
/// fewest of them share; a text is probed at each of its 3-byte windows.
#[derive(Debug, Clone, Default)]
struct Grams {
    /// Ascending glob indices per gram.
    buckets: HashMap<u32, Vec<u32>>,
    /// One bit per [`gram_bit`]: most windows of a text miss here, cheaply.
    filter: Vec<u64>,
}

fn gram(window: &[u8]) -> u32 {
    u32::from(window[0]) | u32::from(window[1]) << 8 | u32::from(window[2]) << 16
}

fn gram_bit(gram: u32) -> usize {
    (gram.wrapping_mul(0x9E37_79B1) >> 16) as usize
}

impl Grams {
    fn build(globs: &[(u32, Vec<&str>)]) -> Self {
        let grams_of = |runs: &[&str]| -> Vec<u32> {
            let mut grams: Vec<u32> = runs
                .iter()
                .flat_map(|r| r.as_bytes().windows(GRAM).map(gram))
                .collect();
            grams.sort_unstable();
            grams.dedup();
            grams
        };
        let mut counts: HashMap<u32, u32> = HashMap::new();
        let all: Vec<Vec<u32>> = globs.iter().map(|(_, runs)| grams_of(runs)).collect();
        for g in all.iter().flatten() {
            *counts.entry(*g).or_default() += 1;
        }
        let mut grams = Self::default();
        for ((index, _), own) in globs.iter().zip(&all) {
            let rarest = own.iter().min_by_key(|g| counts[g]).expect("has a gram");
            grams.buckets.entry(*rarest).or_default().push(*index);
        }
        if !grams.buckets.is_empty() {
            grams.filter = vec![0; 1 << 10];
            for g in grams.buckets.keys() {
                let bit = gram_bit(*g);
                grams.filter[bit / 64] |= 1 << (bit % 64);
            }
        }
        grams
    }

    fn probe(&self, bytes: &[u8], matchers: &[Matcher], text: &str, best: &mut Option<u32>) {
        if self.buckets.is_empty() {
            return;
        }
        let mut hits: Vec<u32> = bytes
            .windows(GRAM)
            .map(gram)
            .filter(|g| {
                let bit = gram_bit(*g);
                self.filter[bit / 64] & (1 << (bit % 64)) != 0
            })
            .collect();
        hits.sort_unstable();
        hits.dedup();
        for g in hits {
            if let Some(bucket) = self.buckets.get(&g) {
                let found = first_verified(bucket, matchers, text, *best);
                offer(best, found);
            }
        }
    }
}

#[cfg(test)]
mod tests;
