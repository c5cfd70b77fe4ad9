//! A statement of the proxy's own on an idle session ([`WireEvent::Injected`]): the bytes it
//! sends (`pgwire`'s Query, encoded by the crate), and the [`Swallow`] that takes the server's
//! answer off the stream before the client could see it.
//!
//! [`WireEvent::Injected`]: crate::WireEvent::Injected

use bytes::BytesMut;
use pgwire::messages::simplequery::Query;
use pgwire::messages::Message;

/// `sql` as one simple Query message.
pub fn query_message(sql: &str) -> Vec<u8> {
    let mut buf = BytesMut::new();
    // Encoding into a growable buffer only fails for a statement over pgwire's size limit,
    // which the proxy's own statements are far below: such a statement is sent as nothing.
    match Query::new(sql.to_owned()).encode(&mut buf) {
        Ok(()) => buf.to_vec(),
        Err(_) => Vec::new(),
    }
}

/// The server's answer to an injected Query, read off the server's stream: everything up to
/// and including its ReadyForQuery, but for an asynchronous NotificationResponse (a `NOTIFY`
/// the client listens for), which is the client's and goes on to it.
///
/// The messages are only framed here (a type byte and a length, the protocol's envelope), not
/// decoded: the swallow needs their bytes whole to pass a notification on, and their type to
/// find the end, which `pgwire`'s decoder, consuming its input, does not give back.
#[derive(Debug, Default)]
pub struct Swallow {
    buf: BytesMut,
    done: bool,
}

/// NotificationResponse.
const NOTIFICATION: u8 = b'A';
/// ReadyForQuery.
const READY: u8 = b'Z';

impl Swallow {
    /// A swallow waiting for the answer.
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes what the server sent next; returns what of it is the client's: a notification
    /// met on the way, and once the answer's ReadyForQuery has come, all that follows it.
    pub fn feed(&mut self, data: &[u8]) -> Vec<u8> {
        if self.done {
            return data.to_vec();
        }
        self.buf.extend_from_slice(data);
        let mut client = Vec::new();
        loop {
            match frame(&self.buf) {
                Frame::Partial => return client,
                // Not the protocol: the swallow ends there, the rest going on, so that a stream
                // it cannot read is never held back.
                Frame::Bad => self.done = true,
                Frame::Whole(len) => {
                    let message = self.buf.split_to(len);
                    match message[0] {
                        NOTIFICATION => client.extend_from_slice(&message),
                        READY => self.done = true,
                        _ => {}
                    }
                }
            }
            if self.done {
                client.extend_from_slice(&self.buf.split());
                return client;
            }
        }
    }

    /// Whether the answer has come whole (or the stream could not be read).
    pub fn done(&self) -> bool {
        self.done
    }
}

/// The message at the head of a buffer.
enum Frame {
    /// Not all there yet.
    Partial,
    /// A length the protocol cannot have.
    Bad,
    /// All there: its length, type byte included.
    Whole(usize),
}

/// The message at the head of `buf`: a type byte, then its length (which counts itself).
fn frame(buf: &[u8]) -> Frame {
    let Some(Ok(head)) = buf.get(1..5).map(<[u8; 4]>::try_from) else {
        return Frame::Partial;
    };
    match usize::try_from(i32::from_be_bytes(head)) {
        Ok(len) if len >= 4 && buf.len() > len => Frame::Whole(len + 1),
        Ok(len) if len >= 4 => Frame::Partial,
        _ => Frame::Bad,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(kind: u8, body: &[u8]) -> Vec<u8> {
        let mut m = vec![kind];
        m.extend_from_slice(&((body.len() + 4) as i32).to_be_bytes());
        m.extend_from_slice(body);
        m
    }

    /// The answer to `SELECT pg_advisory_unlock_all()` (a void column, one row), cut anywhere,
    /// is taken whole, and what follows its ReadyForQuery goes on.
    #[test]
    fn an_answer_is_swallowed_to_its_ready_for_query_and_no_further() {
        let mut answer = Vec::new();
        let mut row_desc = 1i16.to_be_bytes().to_vec();
        row_desc.extend_from_slice(b"pg_advisory_unlock_all\0");
        row_desc.extend_from_slice(&[0; 4]);
        row_desc.extend_from_slice(&[0; 2]);
        row_desc.extend_from_slice(&2278u32.to_be_bytes());
        row_desc.extend_from_slice(&4i16.to_be_bytes());
        row_desc.extend_from_slice(&(-1i32).to_be_bytes());
        row_desc.extend_from_slice(&0i16.to_be_bytes());
        answer.extend(msg(b'T', &row_desc));
        let mut row = 1i16.to_be_bytes().to_vec();
        row.extend_from_slice(&0i32.to_be_bytes());
        answer.extend(msg(b'D', &row));
        answer.extend(msg(b'C', b"SELECT 1\0"));
        answer.extend(msg(b'Z', b"I"));
        let next = msg(b'Z', b"I");
        for cut in 1..answer.len() {
            let mut s = Swallow::new();
            assert_eq!(s.feed(&answer[..cut]), Vec::<u8>::new(), "cut at {cut}");
            assert!(!s.done());
            let mut rest = answer[cut..].to_vec();
            rest.extend_from_slice(&next);
            assert_eq!(s.feed(&rest), next, "cut at {cut}");
            assert!(s.done());
            assert_eq!(s.feed(&next), next);
        }
    }

    /// A notification that comes while the answer does is the client's: it goes on.
    #[test]
    fn a_notification_on_the_way_goes_on_to_the_client() {
        let note = msg(b'A', b"\0\0\0\x07wake\0\0");
        let mut stream = msg(b'C', b"SELECT 1\0");
        stream.extend_from_slice(&note);
        stream.extend(msg(b'Z', b"I"));
        let mut s = Swallow::new();
        assert_eq!(s.feed(&stream), note);
        assert!(s.done());
    }

    /// Bytes that are not the protocol end the swallow: they go on, and nothing is held back.
    #[test]
    fn a_stream_it_cannot_read_goes_on() {
        let bad = [b'C', 0, 0, 0, 1, b'x', b'y'];
        let mut s = Swallow::new();
        assert_eq!(s.feed(&bad), bad.to_vec());
        assert!(s.done());
    }

    #[test]
    fn the_query_is_pgwires_simple_query() {
        let m = query_message("SELECT 1");
        assert_eq!(m, msg(b'Q', b"SELECT 1\0"));
    }
}
