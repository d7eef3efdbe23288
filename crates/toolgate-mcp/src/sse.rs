//! Server-sent events as the streamable-HTTP transport carries them, read
//! incrementally and re-encoded.
//!
//! The gateway must see every event a server sends (an answer it has to
//! judge may come in any of them), so framing follows the SSE rules to the
//! letter: a line ends at CRLF, LF or a lone CR, and an event ends at an
//! empty line. Each byte is scanned once however the stream is chunked, and
//! the event being read is bounded: a server cannot make the gateway hold
//! or rescan an unbounded buffer.

/// One event: its fields as the server sent them (`data` lines joined by
/// `\n`, comments dropped).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Event {
    /// `id:`, the client's resumption point.
    pub id: Option<String>,
    /// `event:`, the event type.
    pub event: Option<String>,
    /// `retry:`, the reconnection delay.
    pub retry: Option<String>,
    /// Every `data:` line, joined by `\n`.
    pub data: Option<String>,
}

impl Event {
    /// The event in SSE framing (LF line ends, a blank line after it); the
    /// data's own line breaks become separate `data:` lines.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        for (name, value) in [
            ("id", &self.id),
            ("event", &self.event),
            ("retry", &self.retry),
        ] {
            if let Some(v) = value {
                out.push_str(name);
                out.push_str(": ");
                out.push_str(v);
                out.push('\n');
            }
        }
        if let Some(data) = &self.data {
            for line in data.split('\n') {
                out.push_str("data: ");
                out.push_str(line);
                out.push('\n');
            }
        }
        out.push('\n');
        out
    }

    fn is_empty(&self) -> bool {
        self.id.is_none() && self.event.is_none() && self.retry.is_none() && self.data.is_none()
    }
}

/// The event being read is larger than the decoder's limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("an event of the server's stream is larger than {limit} bytes")]
pub struct EventTooLarge {
    /// The limit, in bytes.
    pub limit: usize,
}

/// Incremental SSE reader.
#[derive(Debug)]
pub struct Decoder {
    /// Bytes not yet consumed: the start of an unfinished line.
    pending: Vec<u8>,
    /// How far into `pending` has been searched for a line end.
    scanned: usize,
    /// A CR ended the previous line: an LF first in the next chunk belongs
    /// to it.
    after_cr: bool,
    event: Event,
    event_bytes: usize,
    limit: usize,
}

impl Decoder {
    /// A decoder that refuses events (all their lines together) longer than
    /// `limit` bytes.
    pub fn new(limit: usize) -> Self {
        Self {
            pending: Vec::new(),
            scanned: 0,
            after_cr: false,
            event: Event::default(),
            event_bytes: 0,
            limit,
        }
    }

    /// Reads `chunk`; returns the events it completed, in order.
    pub fn push(&mut self, chunk: &[u8]) -> Result<Vec<Event>, EventTooLarge> {
        let mut chunk = chunk;
        if self.after_cr && chunk.first() == Some(&b'\n') {
            chunk = &chunk[1..];
        }
        self.after_cr = false;
        self.pending.extend_from_slice(chunk);
        let mut events = Vec::new();
        let mut start = 0;
        let mut at = self.scanned;
        while let Some(offset) = self.pending[at..]
            .iter()
            .position(|b| *b == b'\n' || *b == b'\r')
        {
            let end = at + offset;
            let mut next = end + 1;
            if self.pending[end] == b'\r' {
                match self.pending.get(next) {
                    Some(b'\n') => next += 1,
                    Some(_) => {}
                    // The LF of a CRLF may be the next chunk's first byte.
                    None => self.after_cr = true,
                }
            }
            let line = String::from_utf8_lossy(&self.pending[start..end]).into_owned();
            self.event_bytes += next - start;
            if self.event_bytes > self.limit {
                return Err(EventTooLarge { limit: self.limit });
            }
            if let Some(event) = self.line(&line) {
                events.push(event);
            }
            start = next;
            at = next;
        }
        self.pending.drain(..start);
        self.scanned = self.pending.len();
        if self.event_bytes + self.pending.len() > self.limit {
            return Err(EventTooLarge { limit: self.limit });
        }
        Ok(events)
    }

    /// One line; returns the event an empty line completes.
    fn line(&mut self, line: &str) -> Option<Event> {
        if line.is_empty() {
            self.event_bytes = 0;
            let event = std::mem::take(&mut self.event);
            return (!event.is_empty()).then_some(event);
        }
        if line.starts_with(':') {
            return None;
        }
        let (name, value) = match line.split_once(':') {
            Some((n, v)) => (n, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match name {
            "data" => match &mut self.event.data {
                Some(data) => {
                    data.push('\n');
                    data.push_str(value);
                }
                None => self.event.data = Some(value.to_owned()),
            },
            "id" if !value.contains('\0') => self.event.id = Some(value.to_owned()),
            "event" => self.event.event = Some(value.to_owned()),
            "retry" => self.event.retry = Some(value.to_owned()),
            _ => {}
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(chunks: &[&[u8]]) -> Vec<Event> {
        let mut d = Decoder::new(1 << 20);
        chunks.iter().flat_map(|c| d.push(c).unwrap()).collect()
    }

    fn data(events: &[Event]) -> Vec<&str> {
        events.iter().filter_map(|e| e.data.as_deref()).collect()
    }

    #[test]
    fn every_line_ending_frames_events() {
        for framing in [
            &b"data: a\n\ndata: b\n\n"[..],
            b"data: a\r\n\r\ndata: b\r\n\r\n",
            b"data: a\r\rdata: b\r\r",
            b"data: a\r\n\rdata: b\n\r\n",
        ] {
            assert_eq!(data(&all(&[framing])), ["a", "b"], "{framing:?}");
        }
    }

    #[test]
    fn chunking_does_not_change_the_events() {
        let stream =
            b"id: 7\r\nevent: message\r\ndata: {\"x\":\r\ndata: 1}\r\n\r\n: keep\r\rdata: z\r\r";
        let whole = all(&[stream]);
        for cut in 0..stream.len() {
            let (a, b) = stream.split_at(cut);
            assert_eq!(all(&[a, b]), whole, "cut at {cut}");
        }
        let bytes: Vec<&[u8]> = stream.chunks(1).collect();
        assert_eq!(all(&bytes), whole);
        assert_eq!(whole[0].id.as_deref(), Some("7"));
        assert_eq!(whole[0].data.as_deref(), Some("{\"x\":\n1}"));
        assert_eq!(data(&whole), ["{\"x\":\n1}", "z"]);
    }

    #[test]
    fn an_unfinished_event_is_not_an_event() {
        assert!(all(&[b"data: never ended\n"]).is_empty());
        // An id-only event (a resumption point) is kept.
        let e = all(&[b"id: p1\ndata:\n\nid: p2\n\n"]);
        assert_eq!(e.len(), 2);
        assert_eq!(e[0].data.as_deref(), Some(""));
        assert_eq!(e[1].id.as_deref(), Some("p2"));
    }

    #[test]
    fn events_are_bounded_across_lines_and_chunks() {
        let mut d = Decoder::new(64);
        assert!(d.push(&[b'a'; 60]).is_ok());
        assert_eq!(d.push(&[b'a'; 10]), Err(EventTooLarge { limit: 64 }));
        let mut d = Decoder::new(64);
        let mut failed = false;
        for _ in 0..20 {
            failed |= d.push(b"data: 0123456789\n").is_err();
        }
        assert!(failed, "many short lines of one event are bounded too");
        // Events under the bound keep flowing for ever.
        let mut d = Decoder::new(64);
        for _ in 0..1000 {
            assert_eq!(d.push(b"data: 0123456789\n\n").unwrap().len(), 1);
        }
    }

    #[test]
    fn encoding_round_trips() {
        let e = Event {
            id: Some("9".into()),
            event: Some("message".into()),
            retry: None,
            data: Some("{\"a\":1}\nsecond".into()),
        };
        assert_eq!(all(&[e.encode().as_bytes()]), [e]);
    }
}
