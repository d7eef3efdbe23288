//! Lexical path normalization: the one spelling of a path that rules see.
//!
//! A hardline such as `/w/.env` must not be passed by writing the same
//! file another way (`/w/.env/`, `/w//.env`, `/w/./.env`, `/w/x/../.env`).
//! Every path argument of a path-bearing tool is therefore rewritten before
//! any glob sees it:
//!
//! - repeated `/` become one, and a trailing `/` is dropped (`/` stays);
//! - `.` segments are dropped;
//! - `..` removes the segment before it, as text. A `..` with nothing left
//!   to remove (`..`, `a/../..`, `/..`) climbs above where the path starts
//!   and is refused ([`Reason::PathEscapes`]);
//! - a NUL anywhere is refused ([`Reason::PathInvalid`]): no system call
//!   would see what follows it.
//!
//! An empty path stays empty, and a relative path with nothing left is `.`.
//! Nothing here touches a filesystem: symbolic links are not resolved (a
//! tool that follows them must stay inside its root itself, as the
//! workspace API does), `\` is an ordinary character, and case and Unicode
//! forms are kept as written.

use std::borrow::Cow;

use serde_json::{Map, Value};

use crate::verdict::Reason;

/// The normalized spelling of `path` (borrowed when it already is), or the
/// reason the evaluator denies it with.
pub fn normalize(path: &str) -> Result<Cow<'_, str>, Reason> {
    if path.contains('\0') {
        return Err(Reason::PathInvalid);
    }
    if is_normal(path) {
        return Ok(Cow::Borrowed(path));
    }
    let absolute = path.starts_with('/');
    let mut kept: Vec<&str> = Vec::new();
    for segment in path.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                if kept.pop().is_none() {
                    return Err(Reason::PathEscapes);
                }
            }
            s => kept.push(s),
        }
    }
    let joined = kept.join("/");
    Ok(Cow::Owned(match (absolute, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".to_owned(),
        (false, false) => joined,
    }))
}

/// True when `path` is already in normal form: no empty, `.` or `..`
/// segment (besides the root of an absolute path, and `.` alone) and no
/// trailing `/` (besides `/` itself).
fn is_normal(path: &str) -> bool {
    if path.is_empty() || path == "/" || path == "." {
        return true;
    }
    let body = path.strip_prefix('/').unwrap_or(path);
    body.split('/').all(|s| !matches!(s, "" | "." | ".."))
}

/// `args` with the values of the path arguments `names` normalized: a
/// string, or each string of an array. Borrowed when nothing changes.
pub(crate) fn normalize_args<'a>(
    names: &[String],
    args: &'a Map<String, Value>,
) -> Result<Cow<'a, Map<String, Value>>, Reason> {
    let mut changed: Option<Map<String, Value>> = None;
    for name in names {
        let replacement = match args.get(name) {
            Some(Value::String(s)) => match normalize(s)? {
                Cow::Borrowed(_) => None,
                Cow::Owned(n) => Some(Value::String(n)),
            },
            Some(Value::Array(items)) => {
                let mut any = false;
                let mut out = Vec::with_capacity(items.len());
                for item in items {
                    out.push(match item {
                        Value::String(s) => match normalize(s)? {
                            Cow::Borrowed(_) => item.clone(),
                            Cow::Owned(n) => {
                                any = true;
                                Value::String(n)
                            }
                        },
                        other => other.clone(),
                    });
                }
                any.then_some(Value::Array(out))
            }
            _ => None,
        };
        if let Some(value) = replacement {
            changed
                .get_or_insert_with(|| args.clone())
                .insert(name.clone(), value);
        }
    }
    Ok(changed.map_or(Cow::Borrowed(args), Cow::Owned))
}

/// Every path the arguments `names` of `args` hold: string values and the
/// strings of array values.
pub(crate) fn path_values<'a>(
    names: &'a [String],
    args: &'a Map<String, Value>,
) -> impl Iterator<Item = &'a str> {
    names
        .iter()
        .filter_map(|name| args.get(name))
        .flat_map(|value| match value {
            Value::String(s) => vec![s.as_str()],
            Value::Array(items) => items.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variants_collapse_to_one_spelling() {
        for (raw, normal) in [
            ("/w/.env", "/w/.env"),
            ("/w/.env/", "/w/.env"),
            ("/w//.env//", "/w/.env"),
            ("/w/.env/.", "/w/.env"),
            ("/w/./.env", "/w/.env"),
            ("/w/x/../.env", "/w/.env"),
            ("//w/.env", "/w/.env"),
            ("a/b/../c", "a/c"),
            ("./a", "a"),
            ("a/..", "."),
            ("./", "."),
            (".", "."),
            ("/", "/"),
            ("///", "/"),
            ("/a/..", "/"),
            ("", ""),
            ("...", "..."),
            ("a/.../b", "a/.../b"),
            ("a\\..\\b", "a\\..\\b"),
        ] {
            assert_eq!(normalize(raw).unwrap(), normal, "{raw:?}");
            assert_eq!(
                normalize(normal).unwrap(),
                normal,
                "{normal:?} is a fixed point"
            );
        }
        assert!(matches!(normalize("a/b").unwrap(), Cow::Borrowed(_)));
    }

    #[test]
    fn climbing_out_and_nul_are_refused() {
        for raw in ["..", "../x", "a/../../x", "/..", "/a/../..", "./.."] {
            assert_eq!(normalize(raw), Err(Reason::PathEscapes), "{raw:?}");
        }
        assert_eq!(normalize("/w/.env\0.txt"), Err(Reason::PathInvalid));
    }

    #[test]
    fn arrays_and_strings_are_normalized_in_place() {
        let args: Map<String, Value> = serde_json::from_value(serde_json::json!({
            "path": "a//b/", "paths": ["x/./y", 3, "z"], "content": "a//b"
        }))
        .unwrap();
        let names = vec!["path".to_owned(), "paths".to_owned(), "missing".to_owned()];
        let out = normalize_args(&names, &args).unwrap();
        assert_eq!(out["path"], "a/b");
        assert_eq!(out["paths"], serde_json::json!(["x/y", 3, "z"]));
        assert_eq!(out["content"], "a//b");
        let values: Vec<&str> = path_values(&names, &out).collect();
        assert_eq!(values, ["a/b", "x/y", "z"]);
        let bad: Map<String, Value> =
            serde_json::from_value(serde_json::json!({"paths": ["ok", "../x"]})).unwrap();
        assert_eq!(
            normalize_args(&names, &bad).unwrap_err(),
            Reason::PathEscapes
        );
    }
}
