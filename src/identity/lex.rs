//! Right-to-left readers for the `Forwarded` (RFC 7239) and
//! `X-Forwarded-For` lists.
//!
//! Hand-written on purpose: no well-maintained crate parses RFC 7239 and
//! none reads a forwarded list *from the right*, which is what the trust walk
//! needs. Reading leftwards, one element at a time, means the walk never
//! lexes a byte left of the element where it stops. That is what makes the
//! client's own prefix of the header (anything it likes, unbalanced quotes
//! included) unable to change how the proxies' suffix is read: a left-to-right
//! tokenizer would let an opening quote in the client's part swallow the
//! commas the proxies appended. It also bounds the work: each call scans only
//! the bytes of the element it returns, so the whole walk is linear in the
//! bytes it reaches.
//!
//! Nothing here indexes out of bounds or allocates more than one unescaped
//! `for=` value at a time, whatever the input bytes, and no line is touched
//! before the walk reaches it.

use std::borrow::Cow;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::HeaderSource;

/// What one list element says about the client, as far as the walk cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Node {
    /// An empty list element (`a, , b`): skipped, as HTTP lists require.
    Empty,
    /// A client address (not yet canonicalised).
    Addr(IpAddr),
    /// `unknown`: the proxy did not know the address.
    Unknown,
    /// An RFC 7239 obfuscated identifier (`_hidden`).
    Obfuscated,
    /// Anything else: bad syntax, no `for=`, a zone id, ...
    Malformed,
}

/// A header field's lines in received order, readable from the back.
pub(super) trait Lines<'h>: DoubleEndedIterator<Item = &'h [u8]> {}

impl<'h, L: DoubleEndedIterator<Item = &'h [u8]>> Lines<'h> for L {}

/// The elements of a header field, read from the right: the last element of
/// the last line first. Several lines of the field concatenate as one list
/// (RFC 9110 section 5.3); a line boundary ends an element, so a quoted
/// string never spans lines.
///
/// After a `Malformed` element the iterator ends: with bad syntax there is
/// no reliable place to resume, and the walk stops there anyway.
///
/// Lines are taken from the back of their iterator one at a time, as the
/// walk reaches them, so lines left of where it stops are never touched:
/// the client can add as many as it likes at no cost.
pub(super) struct ReverseList<'h, L> {
    /// Lines not yet started, in received order; taken from the back.
    lines: L,
    /// The line being read and the end (exclusive) of its next element.
    current: Option<(&'h [u8], usize)>,
    source: HeaderSource,
    failed: bool,
}

impl<'h, L: Lines<'h>> ReverseList<'h, L> {
    pub(super) fn new(source: HeaderSource, lines: L) -> ReverseList<'h, L> {
        ReverseList {
            lines,
            current: None,
            source,
            failed: false,
        }
    }
}

impl<'h, L: Lines<'h>> Iterator for ReverseList<'h, L> {
    type Item = Node;

    fn next(&mut self) -> Option<Node> {
        if self.failed {
            return None;
        }
        let (line, end) = match self.current.take() {
            Some(current) => current,
            None => {
                let line = self.lines.next_back()?;
                (line, line.len())
            }
        };
        let (node, before) = match self.source {
            HeaderSource::XForwardedFor => xff_element(line, end),
            HeaderSource::Forwarded => forwarded_element(line, end),
        };
        self.current = before.map(|before| (line, before));
        self.failed = node == Node::Malformed;
        Some(node)
    }
}

// ---------------------------------------------------------------------------
// X-Forwarded-For: `1*( OWS entry OWS "," ) `, no quoting.

/// The element ending at `end`, and where the element before it ends (the
/// index of the separating comma), if any.
fn xff_element(line: &[u8], end: usize) -> (Node, Option<usize>) {
    let head = &line[..end];
    match head.iter().rposition(|&b| b == b',') {
        Some(comma) => (xff_node(trim_ows(&head[comma + 1..])), Some(comma)),
        None => (xff_node(trim_ows(head)), None),
    }
}

/// `IPv4`, `IPv4:port`, `IPv6`, `[IPv6]`, `[IPv6]:port` or `unknown`.
/// X-Forwarded-For has no obfuscated identifiers: `_x` is malformed.
fn xff_node(entry: &[u8]) -> Node {
    if entry.is_empty() {
        return Node::Empty;
    }
    if entry.eq_ignore_ascii_case(b"unknown") {
        return Node::Unknown;
    }
    let addr = if let Some(rest) = entry.strip_prefix(b"[") {
        bracketed_v6(rest, true)
    } else {
        match entry.iter().filter(|&&b| b == b':').count() {
            0 => ipv4(entry),
            1 => ipv4_with_port(entry),
            // Two colons or more: only a bare IPv6 address fits.
            _ => ipv6(entry).map(IpAddr::V6),
        }
    };
    addr.map_or(Node::Malformed, Node::Addr)
}

fn ipv4_with_port(entry: &[u8]) -> Option<IpAddr> {
    let colon = entry.iter().position(|&b| b == b':')?;
    let (host, port) = (&entry[..colon], &entry[colon + 1..]);
    if is_port(port) { ipv4(host) } else { None }
}

// ---------------------------------------------------------------------------
// Forwarded (RFC 7239 section 4):
//   Forwarded         = 1#forwarded-element
//   forwarded-element = [ forwarded-pair ] *( ";" [ forwarded-pair ] )
//   forwarded-pair    = token "=" value
//   value             = token / quoted-string
//
// Leniency: optional whitespace is accepted around ";" as well as ","
// (common in the wild, and unambiguous). Nothing else is relaxed: in
// particular ":" and "[" are not token characters, so a port or an IPv6
// address must be quoted, as section 6 says.

/// Bad syntax: the element cannot be delimited.
struct Syntax;

/// One `for=` value, still escaped if quoted.
#[derive(Clone, Copy)]
struct Value<'h> {
    raw: &'h [u8],
    quoted: bool,
}

impl<'h> Value<'h> {
    /// The value with quoted-pairs resolved. `raw` was validated by
    /// `validate_quoted`, so every backslash starts a pair.
    fn unescaped(self) -> Cow<'h, [u8]> {
        if !self.quoted || !self.raw.contains(&b'\\') {
            return Cow::Borrowed(self.raw);
        }
        let mut out = Vec::with_capacity(self.raw.len());
        let mut bytes = self.raw.iter();
        while let Some(&b) = bytes.next() {
            let b = if b == b'\\' {
                bytes.next().copied().unwrap_or(b)
            } else {
                b
            };
            out.push(b);
        }
        Cow::Owned(out)
    }
}

/// What an element's pairs said about `for`.
#[derive(Default)]
struct Element<'h> {
    for_value: Option<Value<'h>>,
    for_count: usize,
    /// Any pair or ";" at all: an element that is only whitespace is an
    /// empty list element, `;` alone is an element without `for=`.
    anything: bool,
}

impl<'h> Element<'h> {
    fn add(&mut self, name: &[u8], value: Value<'h>) {
        self.anything = true;
        if name.eq_ignore_ascii_case(b"for") {
            self.for_count += 1;
            self.for_value = Some(value);
        }
    }

    fn node(&self) -> Node {
        match (self.anything, self.for_count, self.for_value) {
            (false, _, _) => Node::Empty,
            // RFC 7239: a parameter MUST NOT occur twice in one element; two
            // `for=` would be two answers, so neither is believed.
            (true, 1, Some(value)) => forwarded_node(&value.unescaped()),
            _ => Node::Malformed,
        }
    }
}

fn forwarded_element(line: &[u8], end: usize) -> (Node, Option<usize>) {
    match lex_element(line, end) {
        Ok((element, before)) => (element.node(), before),
        Err(Syntax) => (Node::Malformed, None),
    }
}

/// Reads the element ending at `end` leftwards, pair by pair, up to the
/// comma before it (whose index is returned) or the start of the line.
fn lex_element(line: &[u8], end: usize) -> Result<(Element<'_>, Option<usize>), Syntax> {
    let mut element = Element::default();
    let mut pos = end;
    loop {
        pos = skip_ows_left(line, pos);
        // Not at a delimiter or the line start: a pair ends here (otherwise
        // the pair is empty, which the grammar allows).
        if pos > 0 && !matches!(line[pos - 1], b';' | b',') {
            let (name, value, start) = pair_left(line, pos)?;
            element.add(name, value);
            pos = skip_ows_left(line, start);
        }
        match pos.checked_sub(1).map(|i| line[i]) {
            None => return Ok((element, None)),
            Some(b',') => return Ok((element, Some(pos - 1))),
            Some(b';') => {
                element.anything = true;
                pos -= 1;
            }
            Some(_) => return Err(Syntax),
        }
    }
}

/// The pair `token "=" value` ending at `end` (> 0): its name, its value and
/// the index where it starts.
fn pair_left(line: &[u8], end: usize) -> Result<(&[u8], Value<'_>, usize), Syntax> {
    let (value, value_start) = if line[end - 1] == b'"' {
        quoted_left(line, end - 1)?
    } else {
        let start = token_start(line, end);
        let raw = &line[start..end];
        if raw.is_empty() {
            return Err(Syntax);
        }
        (Value { raw, quoted: false }, start)
    };
    if value_start == 0 || line[value_start - 1] != b'=' {
        return Err(Syntax);
    }
    let name_end = value_start - 1;
    let name_start = token_start(line, name_end);
    if name_start == name_end {
        return Err(Syntax);
    }
    Ok((&line[name_start..name_end], value, name_start))
}

/// The quoted-string whose closing quote is at `close`: its content and the
/// index of its opening quote.
///
/// Read from the right, a `"` opens the string when an even number of
/// backslashes precedes it (an odd run ends in a quoted-pair `\"`). Inside a
/// quoted-string every backslash starts a pair, so that parity is the same
/// one a left-to-right reader would see. Each backslash run is counted once,
/// for the quote right after it, so the scan stays linear.
fn quoted_left(line: &[u8], close: usize) -> Result<(Value<'_>, usize), Syntax> {
    let mut i = close;
    while i > 0 {
        i -= 1;
        if line[i] == b'"' && backslashes_before(line, i).is_multiple_of(2) {
            let raw = &line[i + 1..close];
            validate_quoted(raw)?;
            return Ok((Value { raw, quoted: true }, i));
        }
    }
    Err(Syntax)
}

fn backslashes_before(line: &[u8], i: usize) -> usize {
    line[..i].iter().rev().take_while(|&&b| b == b'\\').count()
}

/// `*( qdtext / quoted-pair )` (RFC 9110 section 5.6.4).
fn validate_quoted(raw: &[u8]) -> Result<(), Syntax> {
    let mut bytes = raw.iter();
    while let Some(&b) = bytes.next() {
        let ok = match b {
            b'\\' => bytes.next().is_some_and(|&e| is_quotable(e)),
            b'"' => false,
            _ => is_quotable(b),
        };
        if !ok {
            return Err(Syntax);
        }
    }
    Ok(())
}

/// HTAB, SP, visible ASCII and obs-text: what qdtext allows (plus `"` and
/// `\`, handled by the caller) and what a quoted-pair may escape.
fn is_quotable(b: u8) -> bool {
    matches!(b, b'\t' | b' ' | 0x21..=0x7e | 0x80..=0xff)
}

/// RFC 7239 `node = nodename [ ":" node-port ]`, where `nodename` is
/// `IPv4address`, `"[" IPv6address "]"`, `unknown` or an obfuscated
/// identifier, and `node-port` is 1 to 5 digits or an obfuscated port.
fn forwarded_node(node: &[u8]) -> Node {
    let (name, port) = split_node(node);
    if port.is_some_and(|port| !is_port(port) && !is_obfuscated(port)) {
        return Node::Malformed;
    }
    if let Some(rest) = name.strip_prefix(b"[") {
        // The port was split off already: nothing may follow the "]".
        return bracketed_v6(rest, false).map_or(Node::Malformed, Node::Addr);
    }
    if name.eq_ignore_ascii_case(b"unknown") {
        Node::Unknown
    } else if is_obfuscated(name) {
        Node::Obfuscated
    } else {
        ipv4(name).map_or(Node::Malformed, Node::Addr)
    }
}

/// Splits `nodename` from the port: after the `]` of a bracketed name, at
/// the first `:` otherwise (no other nodename contains one).
fn split_node(node: &[u8]) -> (&[u8], Option<&[u8]>) {
    let search_from = if node.first() == Some(&b'[') {
        node.iter()
            .position(|&b| b == b']')
            .map_or(node.len(), |i| i + 1)
    } else {
        0
    };
    match node[search_from..].iter().position(|&b| b == b':') {
        Some(i) if i == 0 || search_from == 0 => {
            let colon = search_from + i;
            (&node[..colon], Some(&node[colon + 1..]))
        }
        // Something between "]" and ":": leave it for the name check to reject.
        _ => (node, None),
    }
}

/// `obfnode` / `obfport`: `"_" 1*( ALPHA / DIGIT / "." / "_" / "-" )`.
fn is_obfuscated(text: &[u8]) -> bool {
    text.strip_prefix(b"_").is_some_and(|rest| {
        !rest.is_empty()
            && rest
                .iter()
                .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    })
}

// ---------------------------------------------------------------------------
// Shared pieces.

/// `rest` follows a `[`: an IPv6 address, `]`, then nothing, or `:port`
/// when `port_allowed` (X-Forwarded-For; for `Forwarded` the port was split
/// off already).
fn bracketed_v6(rest: &[u8], port_allowed: bool) -> Option<IpAddr> {
    let close = rest.iter().position(|&b| b == b']')?;
    let tail = &rest[close + 1..];
    let tail_ok = tail.is_empty() || (port_allowed && tail.strip_prefix(b":").is_some_and(is_port));
    if tail_ok {
        ipv6(&rest[..close]).map(IpAddr::V6)
    } else {
        None
    }
}

/// 1 to 5 ASCII digits, at most 65535.
fn is_port(text: &[u8]) -> bool {
    (1..=5).contains(&text.len())
        && text.iter().all(u8::is_ascii_digit)
        && std::str::from_utf8(text).is_ok_and(|t| t.parse::<u16>().is_ok())
}

/// A dotted-quad IPv4 address, as strict as std (no leading zeros, no
/// shorthand forms).
fn ipv4(text: &[u8]) -> Option<IpAddr> {
    let text = std::str::from_utf8(text).ok()?;
    text.parse::<Ipv4Addr>().ok().map(IpAddr::V4)
}

/// An IPv6 address as std parses it: no zone id (`%eth0`), no brackets.
fn ipv6(text: &[u8]) -> Option<Ipv6Addr> {
    std::str::from_utf8(text).ok()?.parse().ok()
}

fn is_ows(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

fn trim_ows(text: &[u8]) -> &[u8] {
    let start = text.iter().position(|&b| !is_ows(b)).unwrap_or(text.len());
    let end = text
        .iter()
        .rposition(|&b| !is_ows(b))
        .map_or(start, |i| i + 1);
    &text[start..end]
}

fn skip_ows_left(line: &[u8], mut pos: usize) -> usize {
    while pos > 0 && is_ows(line[pos - 1]) {
        pos -= 1;
    }
    pos
}

/// RFC 9110 `tchar`.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// The start of the run of token characters ending at `end`.
fn token_start(line: &[u8], end: usize) -> usize {
    line[..end]
        .iter()
        .rposition(|&b| !is_tchar(b))
        .map_or(0, |i| i + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes(source: HeaderSource, lines: &[&str]) -> Vec<Node> {
        ReverseList::new(source, lines.iter().map(|l| l.as_bytes())).collect()
    }

    fn addr(text: &str) -> Node {
        Node::Addr(text.parse().unwrap())
    }

    #[test]
    fn xff_reads_from_the_right_across_lines() {
        let got = nodes(
            HeaderSource::XForwardedFor,
            &[
                "192.0.2.1:1234, [2001:db8::1]:443",
                "\t2001:db8::2 ,, 10.0.0.1 ",
            ],
        );
        let want = [
            addr("10.0.0.1"),
            Node::Empty,
            addr("2001:db8::2"),
            addr("2001:db8::1"),
            addr("192.0.2.1"),
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn xff_entry_forms() {
        let one = |text: &str| xff_node(text.as_bytes());
        assert_eq!(one("[2001:db8::1]"), addr("2001:db8::1"));
        assert_eq!(one("UNKNOWN"), Node::Unknown);
        for bad in [
            "fe80::1%eth0",
            "[fe80::1%eth0]",
            "2001:db8::1]",
            "[2001:db8::1]:",
            "[2001:db8::1]x",
            "[192.0.2.1]",
            "192.0.2.1:",
            "192.0.2.1:65536",
            "192.0.2.1:port",
            "192.0.2.01",
            "_hidden",
            "192.0.2.1 192.0.2.2",
            "\"192.0.2.1\"",
        ] {
            assert_eq!(one(bad), Node::Malformed, "{bad}");
        }
    }

    #[test]
    fn forwarded_node_forms() {
        let one = |text: &str| forwarded_node(text.as_bytes());
        assert_eq!(one("192.0.2.43"), addr("192.0.2.43"));
        assert_eq!(one("192.0.2.43:47011"), addr("192.0.2.43"));
        assert_eq!(one("[2001:db8:cafe::17]:4711"), addr("2001:db8:cafe::17"));
        assert_eq!(one("[2001:db8:cafe::17]:_p0rt"), addr("2001:db8:cafe::17"));
        assert_eq!(one("Unknown:1"), Node::Unknown);
        assert_eq!(one("_gazonk"), Node::Obfuscated);
        assert_eq!(one("_SEVKISEK:_x"), Node::Obfuscated);
        for bad in [
            "2001:db8:cafe::17",
            "[2001:db8:cafe::17",
            "[2001:db8:cafe::17]x:80",
            "[fe80::1%25eth0]",
            "192.0.2.43:",
            "192.0.2.43:123456",
            "_",
            "_a!b",
            "",
        ] {
            assert_eq!(one(bad), Node::Malformed, "{bad}");
        }
    }

    #[test]
    fn forwarded_elements_and_pairs() {
        let got = nodes(
            HeaderSource::Forwarded,
            &[
                r#"for="_gazonk", For="[2001:db8:cafe::17]:4711""#,
                r#"for=192.0.2.60;proto=http;by=203.0.113.43, ;for=unknown ;host="a,b;c\"d""#,
            ],
        );
        let want = [
            Node::Unknown,
            addr("192.0.2.60"),
            addr("2001:db8:cafe::17"),
            Node::Obfuscated,
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn forwarded_quoted_pairs_are_unescaped() {
        let got = nodes(HeaderSource::Forwarded, &[r#"for="\[2001:db8::1\]:\80""#]);
        assert_eq!(got, [addr("2001:db8::1")]);
    }

    #[test]
    fn forwarded_syntax_errors_end_the_list() {
        for bad in [
            "for=192.0.2.1:80",    // a port must be quoted
            "for=[2001:db8::1]",   // so must brackets
            "for = 192.0.2.1",     // no whitespace around "="
            "for=\"192.0.2.1",     // unterminated
            "for=\"192.0.2.1\\\"", // the last quote is escaped
            "x for=192.0.2.1",     // junk before the pair
            "=192.0.2.1",          // no name
            "for=",                // no value
            "for=\"192.0.2.1\"x",  // junk after the quoted string
            "for=\"\u{1}\"",       // control character in a quoted string
        ] {
            assert_eq!(
                nodes(HeaderSource::Forwarded, &[bad]),
                [Node::Malformed],
                "{bad}"
            );
        }
        // The element after the bad one (to its left) is never produced.
        assert_eq!(
            nodes(
                HeaderSource::Forwarded,
                &["for=192.0.2.1", "for=192.0.2.2:80"]
            ),
            [Node::Malformed]
        );
    }

    #[test]
    fn forwarded_elements_without_exactly_one_for_are_malformed() {
        for bad in ["proto=https", ";", "for=192.0.2.1;FOR=192.0.2.2"] {
            assert_eq!(
                nodes(HeaderSource::Forwarded, &[bad]),
                [Node::Malformed],
                "{bad}"
            );
        }
        assert_eq!(nodes(HeaderSource::Forwarded, &[" \t "]), [Node::Empty]);
    }

    #[test]
    fn an_unbalanced_quote_left_of_an_element_is_never_read() {
        let got = nodes(HeaderSource::Forwarded, &[r#"for="oops, for=192.0.2.9"#]);
        // Reading from the right, the last element is delimited first; the
        // garbage only shows when the walk goes on to it.
        assert_eq!(got, [addr("192.0.2.9"), Node::Malformed]);
    }

    #[test]
    fn ows_trimming() {
        assert_eq!(trim_ows(b" \t a b \t"), b"a b");
        assert_eq!(trim_ows(b" \t "), b"");
        assert_eq!(trim_ows(b""), b"");
    }
}
