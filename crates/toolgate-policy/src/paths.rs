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
/// string, or each string of an array (nested arrays too). Any other value
/// in a path argument but `null` is refused ([`Reason::PathInvalid`]): a
/// number or object is no path a rule could judge. Borrowed when nothing
/// changes.
pub(crate) fn normalize_args<'a>(
    names: &[String],
    args: &'a Map<String, Value>,
) -> Result<Cow<'a, Map<String, Value>>, Reason> {
    let mut changed: Option<Map<String, Value>> = None;
    for name in names {
        let Some(value) = args.get(name) else {
            continue;
        };
        if let Some(normal) = normalize_value(value)? {
            changed
                .get_or_insert_with(|| args.clone())
                .insert(name.clone(), normal);
        }
    }
    Ok(changed.map_or(Cow::Borrowed(args), Cow::Owned))
}

/// The normal form of one path argument's value, `None` when it already is.
fn normalize_value(value: &Value) -> Result<Option<Value>, Reason> {
    match value {
        Value::Null => Ok(None),
        Value::String(s) => Ok(match normalize(s)? {
            Cow::Borrowed(_) => None,
            Cow::Owned(n) => Some(Value::String(n)),
        }),
        Value::Array(items) => {
            let mut out: Option<Vec<Value>> = None;
            for (i, item) in items.iter().enumerate() {
                if let Some(normal) = normalize_value(item)? {
                    out.get_or_insert_with(|| items.clone())[i] = normal;
                }
            }
            Ok(out.map(Value::Array))
        }
        _ => Err(Reason::PathInvalid),
    }
}

/// Every path the arguments `names` of `args` hold: string values and the
/// strings of (nested) array values.
pub(crate) fn path_values<'a>(names: &'a [String], args: &'a Map<String, Value>) -> Vec<&'a str> {
    fn collect<'v>(value: &'v Value, out: &mut Vec<&'v str>) {
        match value {
            Value::String(s) => out.push(s),
            Value::Array(items) => items.iter().for_each(|v| collect(v, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    for value in names.iter().filter_map(|name| args.get(name)) {
        collect(value, &mut out);
    }
    out
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
            "path": "a//b/", "paths": ["x/./y", ["z//"]], "content": "a//b"
        }))
        .unwrap();
        let names = vec!["path".to_owned(), "paths".to_owned(), "missing".to_owned()];
        let out = normalize_args(&names, &args).unwrap();
        assert_eq!(out["path"], "a/b");
        assert_eq!(out["paths"], serde_json::json!(["x/y", ["z"]]));
        assert_eq!(out["content"], "a//b");
        let values: Vec<&str> = path_values(&names, &out);
        assert_eq!(values, ["a/b", "x/y", "z"]);
        let bad: Map<String, Value> =
            serde_json::from_value(serde_json::json!({"paths": ["ok", "../x"]})).unwrap();
        assert_eq!(
            normalize_args(&names, &bad).unwrap_err(),
            Reason::PathEscapes
        );
        for not_a_path in [
            serde_json::json!({"paths": ["ok", 3]}),
            serde_json::json!({"path": {"p": "/w/.env"}}),
        ] {
            let args: Map<String, Value> = serde_json::from_value(not_a_path).unwrap();
            assert_eq!(
                normalize_args(&names, &args).unwrap_err(),
                Reason::PathInvalid
            );
        }
    }
}
