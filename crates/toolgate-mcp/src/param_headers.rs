//! `Mcp-Param-*` headers (protocol 2026-07-28): a tool may mark a property
//! of its `inputSchema` with `x-mcp-header: NAME`, and an HTTP request
//! calling it then mirrors that argument into the header `Mcp-Param-NAME`,
//! which the server checks against the body. The gateway checks the
//! client's headers the same way (a header that disagrees with the body is
//! refused, `-32020`), and sends the server headers made from the body it
//! forwards, never the client's.

use serde_json::{Map, Value};

/// Prefix of the headers, lowercase as HTTP/2 sends them.
pub const PREFIX: &str = "mcp-param-";

/// One `x-mcp-header` declaration: the header's name and the property's
/// path in the arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamHeader {
    name: String,
    path: Vec<String>,
}

/// The declarations of `schema`, on properties reached through a chain of
/// `properties` only (as the protocol allows), with names that are HTTP
/// tokens; others are ignored (such a header is never sent).
pub fn declarations(schema: &Value) -> Vec<ParamHeader> {
    fn walk(schema: &Value, path: &mut Vec<String>, out: &mut Vec<ParamHeader>, depth: usize) {
        let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
            return;
        };
        if depth > 16 {
            return;
        }
        for (key, property) in properties {
            path.push(key.clone());
            if let Some(name) = property.get("x-mcp-header").and_then(Value::as_str)
                && is_token(name)
                && !out.iter().any(|d| d.name.eq_ignore_ascii_case(name))
            {
                out.push(ParamHeader {
                    name: name.to_owned(),
                    path: path.clone(),
                });
            }
            walk(property, path, out, depth + 1);
            path.pop();
        }
    }
    let mut out = Vec::new();
    walk(schema, &mut Vec::new(), &mut out, 0);
    out
}

/// An RFC 9110 token.
fn is_token(text: &str) -> bool {
    !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// The argument a declaration mirrors, as header text: a string, number
/// or boolean (`None` for anything else, or nothing there).
fn mirrored(decl: &ParamHeader, arguments: &Map<String, Value>) -> Option<String> {
    let (first, rest) = decl.path.split_first()?;
    let mut node = arguments.get(first)?;
    for key in rest {
        node = node.get(key)?;
    }
    match node {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// The headers a call with `arguments` carries to the server.
pub fn headers(decls: &[ParamHeader], arguments: &Map<String, Value>) -> Vec<(String, String)> {
    decls
        .iter()
        .filter_map(|d| {
            let value = mirrored(d, arguments)?;
            Some((
                format!("{PREFIX}{}", d.name.to_ascii_lowercase()),
                crate::message::header_text(&value),
            ))
        })
        .collect()
}

/// Why the client's `Mcp-Param-*` headers (read with `header`) disagree
/// with `arguments`: a mirrored argument whose header is missing, not
/// decodable, or another value. Numbers compare by value (`42` and `42.0`).
pub fn mismatch<'h>(
    decls: &[ParamHeader],
    arguments: &Map<String, Value>,
    header: impl Fn(&str) -> Option<&'h str>,
) -> Option<String> {
    for decl in decls {
        let Some(body) = mirrored(decl, arguments) else {
            continue;
        };
        let name = format!("{PREFIX}{}", decl.name.to_ascii_lowercase());
        let Some(sent) = header(&name) else {
            return Some(format!("Mcp-Param-{} header missing", decl.name));
        };
        let Some(decoded) = crate::message::header_name(sent) else {
            return Some(format!("Mcp-Param-{} header is not decodable", decl.name));
        };
        let numeric = |t: &str| t.parse::<f64>().ok();
        let same = decoded == body
            || matches!((numeric(&decoded), numeric(&body)), (Some(a), Some(b)) if a == b
                && body.bytes().all(|c| c.is_ascii_digit() || b"-.eE+".contains(&c)));
        if !same {
            return Some(format!(
                "Mcp-Param-{} header does not match the body",
                decl.name
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "service": {"type": "string", "x-mcp-header": "Service"},
            "opts": {"type": "object", "properties": {"region": {"type": "string", "x-mcp-header": "Region"}}},
            "list": {"type": "array", "items": {"type": "string", "x-mcp-header": "Item"}},
            "bad": {"type": "string", "x-mcp-header": "two words"},
            "n": {"type": "integer", "x-mcp-header": "N"}}})
    }

    #[test]
    fn declarations_follow_properties_only() {
        let names: Vec<String> = declarations(&schema())
            .into_iter()
            .map(|d| d.name)
            .collect();
        assert_eq!(names, ["N", "Region", "Service"]);
    }

    #[test]
    fn headers_mirror_the_body_and_mismatches_are_named() {
        let decls = declarations(&schema());
        let args = json!({"service": "api", "opts": {"region": "eu ü"}, "n": 42})
            .as_object()
            .unwrap()
            .clone();
        let made = headers(&decls, &args);
        assert!(made.contains(&("mcp-param-service".into(), "api".into())));
        assert!(made.contains(&("mcp-param-n".into(), "42".into())));
        let region = made.iter().find(|h| h.0 == "mcp-param-region").unwrap();
        assert!(region.1.starts_with("=?base64?"), "{region:?}");
        let from = |pairs: Vec<(String, String)>| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| n == name)
                    .map(|(_, v)| v.clone())
                    .map(|v| &*Box::leak(v.into_boxed_str()))
            }
        };
        assert_eq!(mismatch(&decls, &args, from(made.clone())), None);
        let mut other = made.clone();
        other.retain(|h| h.0 != "mcp-param-service");
        assert!(
            mismatch(&decls, &args, from(other.clone()))
                .unwrap()
                .contains("missing")
        );
        other.push(("mcp-param-service".into(), "db".into()));
        assert!(
            mismatch(&decls, &args, from(other))
                .unwrap()
                .contains("does not match")
        );
        let mut float = made;
        float.retain(|h| h.0 != "mcp-param-n");
        float.push(("mcp-param-n".into(), "42.0".into()));
        assert_eq!(mismatch(&decls, &args, from(float)), None);
    }
}
