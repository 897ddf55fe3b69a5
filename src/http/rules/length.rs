//! The length a request declares for its body: its Content-Length, checked
//! against its other framing, for per-byte costs.

use http::header::{CONTENT_LENGTH, TRANSFER_ENCODING};
use http::request::Parts;
use http::{HeaderMap, Version};

use super::CostError;

/// What the request's body says of its own length: `Some(n)` when it is
/// exactly `n` bytes (0 when it is already at its end), `None` when it
/// does not know. The layer reads it before the rules run and leaves it in
/// the request's extensions while they do, for
/// [`extract::content_length`](super::extract::content_length): the head
/// alone cannot tell an HTTP/2 request without a body from one that
/// streams a body of undeclared length.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Framing(Option<u64>);

impl Framing {
    /// The framing of a body that is at its end (`ended`), or whose exact
    /// length is `exact` if known: what an adapter reads of its body type
    /// (the tower layer; actix's head alone is read).
    #[cfg_attr(not(feature = "tower"), allow(dead_code))]
    pub(crate) fn new(ended: bool, exact: Option<u64>) -> Framing {
        Framing(if ended { Some(0) } else { exact })
    }
}

/// The body length `parts` declare, or why they declare none that can be
/// charged. See [`extract::content_length`](super::extract::content_length)
/// for the rules.
pub(super) fn declared(parts: &Parts) -> Result<u64, CostError> {
    let stated = stated(&parts.headers)?;
    if parts.headers.contains_key(TRANSFER_ENCODING) {
        // A body framed by its transfer coding declares no length; one that
        // also states a length is framed two ways, and a server and a proxy
        // that believe different ones are how requests are smuggled.
        return Err(match stated {
            Some(_) => CostError::InvalidContentLength,
            None => CostError::LengthRequired,
        });
    }
    let framing = parts.extensions.get::<Framing>().map(|framing| framing.0);
    match (stated, framing) {
        (Some(stated), Some(Some(exact))) if stated != exact => {
            Err(CostError::InvalidContentLength)
        }
        (Some(stated), _) => Ok(stated),
        (None, Some(Some(exact))) => Ok(exact),
        (None, Some(None)) => Err(CostError::LengthRequired),
        // Outside the layer only the head is known. Over HTTP/1 a request
        // with neither Content-Length nor Transfer-Encoding has no body
        // (RFC 9112 section 6.3); over HTTP/2 and 3 it may have one.
        (None, None) if parts.version <= Version::HTTP_11 => Ok(0),
        (None, None) => Err(CostError::LengthRequired),
    }
}

/// The Content-Length the headers state, if any: every value, on every
/// line, plain digits that fit a `u64`, and all the same (RFC 9110 section
/// 8.6 lets a recipient take `42, 42` as 42, and nothing else).
fn stated(headers: &HeaderMap) -> Result<Option<u64>, CostError> {
    let mut length = None;
    for line in headers.get_all(CONTENT_LENGTH) {
        let line = line.to_str().map_err(|_| CostError::InvalidContentLength)?;
        for value in line.split(',') {
            let value = value.trim_matches([' ', '\t']);
            if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
                return Err(CostError::InvalidContentLength);
            }
            let value: u64 = value.parse().map_err(|_| CostError::InvalidContentLength)?;
            if length.is_some_and(|length| length != value) {
                return Err(CostError::InvalidContentLength);
            }
            length = Some(value);
        }
    }
    Ok(length)
}
