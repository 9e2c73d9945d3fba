//! The last server error each idempotency key was answered with, for providers that replay a saved error unmarked (Coinbase CDP): the same error body again, request id and all, is the saved one replayed.

use std::collections::HashMap;
use std::sync::Mutex;

/// Keys remembered at most; past it the memory starts over, which only delays a key's being seen
/// as spent (the key window decides then).
pub const KEYS_REMEMBERED_MAX: usize = 10_000;

#[derive(Debug, Default)]
pub struct ErrorAnswers {
    last: Mutex<HashMap<String, String>>,
}

impl ErrorAnswers {
    /// Whether `key` was answered with exactly `body` before; remembers `body` as its last answer.
    /// An error body that carries a per-request id (CDP's `correlationId`) is the same twice only
    /// when the provider replayed what it saved.
    pub fn seen_before(&self, key: &str, body: &str) -> bool {
        let mut last = self.last.lock().expect("error answers lock");
        if last.get(key).is_some_and(|before| before == body) {
            return true;
        }
        if last.len() >= KEYS_REMEMBERED_MAX && !last.contains_key(key) {
            last.clear();
        }
        last.insert(key.to_owned(), body.to_owned());
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_same_body_for_the_same_key_is_a_replay() {
        let answers = ErrorAnswers::default();
        let first = r#"{"errorType":"internal_server_error","correlationId":"a1"}"#;
        let fresh = r#"{"errorType":"internal_server_error","correlationId":"b2"}"#;
        assert!(!answers.seen_before("k1", first));
        assert!(!answers.seen_before("k2", first), "another key");
        assert!(!answers.seen_before("k1", fresh), "a new request id: a new error");
        assert!(answers.seen_before("k1", fresh), "the same answer again: replayed");
    }
}
