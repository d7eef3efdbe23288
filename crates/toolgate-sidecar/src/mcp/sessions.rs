//! The MCP session ids an upstream issued: the only ones an agent may send
//! it. A session id is the server's opaque text, so one the agent made up
//! (say, a secret it was told to leak) is a message to the server that no
//! rule decided; it is answered `404`, as the transport answers a session
//! the server does not know, and the client starts a new session.

use std::collections::{HashSet, VecDeque};
use std::sync::Mutex;

/// Most session ids remembered per upstream (the oldest are forgotten:
/// their clients are told to start again).
const MAX_SESSIONS: usize = 4096;
/// Longest session id remembered (the transport asks for visible ASCII).
const MAX_SESSION_CHARS: usize = 256;

#[derive(Debug, Default)]
pub(crate) struct SessionBook {
    inner: Mutex<(HashSet<String>, VecDeque<String>)>,
}

impl SessionBook {
    /// Remembers a session id the upstream answered with.
    pub(crate) fn issued(&self, id: &str) {
        if id.is_empty() || id.len() > MAX_SESSION_CHARS {
            return;
        }
        let mut guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let (known, order) = &mut *guard;
        if known.insert(id.to_owned()) {
            order.push_back(id.to_owned());
            if order.len() > MAX_SESSIONS
                && let Some(oldest) = order.pop_front()
            {
                known.remove(&oldest);
            }
        }
    }

    /// Whether the upstream issued `id`.
    pub(crate) fn knows(&self, id: &str) -> bool {
        let guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        guard.0.contains(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_issued_ids_are_known_and_the_book_is_bounded() {
        let book = SessionBook::default();
        book.issued("srv-1");
        assert!(book.knows("srv-1"));
        assert!(!book.knows("made-up"));
        book.issued(&"x".repeat(MAX_SESSION_CHARS + 1));
        assert!(!book.knows(&"x".repeat(MAX_SESSION_CHARS + 1)));
        for i in 0..MAX_SESSIONS {
            book.issued(&format!("s{i}"));
        }
        assert!(!book.knows("srv-1"), "the oldest is forgotten");
        assert!(book.knows(&format!("s{}", MAX_SESSIONS - 1)));
    }
}
