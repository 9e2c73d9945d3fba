//! Where an idempotency key may come from (two headers, the body) and the rules for combining them.

use axum::http::HeaderMap;

use crate::problem::Problem;

pub const IDEMPOTENCY_KEY_HEADER: &str = "idempotency-key";
pub const X_IDEMPOTENCY_KEY_HEADER: &str = "x-idempotency-key";

/// The one key of a request: all sources that are present must agree (else 422: each is well
/// formed, together they contradict each other).
pub fn collect(headers: &HeaderMap, body_key: Option<&str>) -> Result<Option<String>, Problem> {
    let mut found: Vec<String> = Vec::with_capacity(3);
    for (name, quoted_allowed) in
        [(IDEMPOTENCY_KEY_HEADER, true), (X_IDEMPOTENCY_KEY_HEADER, false)]
    {
        let mut values = headers.get_all(name).iter();
        if let Some(value) = values.next() {
            if values.next().is_some() {
                return Err(key_problem(format!("the {name} header appears more than once")));
            }
            let text = value
                .to_str()
                .map_err(|_| key_problem(format!("the {name} header must be printable ASCII")))?;
            let key = if quoted_allowed { unquote_sf_string(text)? } else { text.to_owned() };
            found.push(key);
        }
    }
    if let Some(k) = body_key {
        found.push(k.to_owned());
    }
    found.dedup();
    match found.len() {
        0 => Ok(None),
        1 => Ok(found.pop()),
        _ => Err(Problem::new(
            axum::http::StatusCode::UNPROCESSABLE_ENTITY,
            "idempotency-key-conflict",
            "Conflicting idempotency keys",
            "the request carries two different idempotency keys (headers and body must agree)",
        )),
    }
}

/// RFC 8941 sf-string (`"..."` with `\"` and `\\` escapes), or the bare token as sent.
fn unquote_sf_string(text: &str) -> Result<String, Problem> {
    let Some(inner) = text.strip_prefix('"') else {
        return Ok(text.to_owned());
    };
    let inner = inner
        .strip_suffix('"')
        .ok_or_else(|| key_problem("unterminated quoted Idempotency-Key"))?;
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(e @ ('"' | '\\')) => out.push(e),
                _ => return Err(key_problem("invalid escape in quoted Idempotency-Key")),
            },
            '"' => return Err(key_problem("unescaped quote in quoted Idempotency-Key")),
            c => out.push(c),
        }
    }
    Ok(out)
}

pub fn key_problem(detail: impl Into<String>) -> Problem {
    Problem::invalid(detail).with_slug("idempotency-key-invalid")
}

impl Problem {
    pub fn with_slug(mut self, slug: &'static str) -> Problem {
        self.slug = slug;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn sources_agree_or_the_request_is_refused() {
        assert_eq!(
            collect(&headers(&[("idempotency-key", "abcdefgh")]), None).unwrap().as_deref(),
            Some("abcdefgh")
        );
        assert_eq!(
            collect(&headers(&[("idempotency-key", "\"abc\\\"defgh\"")]), None).unwrap().as_deref(),
            Some("abc\"defgh")
        );
        assert_eq!(
            collect(&headers(&[("x-idempotency-key", "k1234567")]), Some("k1234567"))
                .unwrap()
                .as_deref(),
            Some("k1234567")
        );
        assert_eq!(collect(&headers(&[]), None).unwrap(), None);
        let both = collect(
            &headers(&[("idempotency-key", "k1234567"), ("x-idempotency-key", "k7654321")]),
            None,
        );
        assert_eq!(both.unwrap_err().slug, "idempotency-key-conflict");
        assert_eq!(
            collect(&headers(&[("idempotency-key", "k1234567")]), Some("other-key"))
                .unwrap_err()
                .slug,
            "idempotency-key-conflict"
        );
        assert_eq!(
            collect(&headers(&[("idempotency-key", "\"open")]), None).unwrap_err().slug,
            "idempotency-key-invalid"
        );
    }
}
