//! What a rule's binding holds for one request, of a type only its kind
//! knows (a key, a permit, a shared budget's receipt), kept by the engine
//! without knowing it: the key types the ready-made extractors give
//! inline, anything else boxed.
//!
//! Why not a box for every binding, or an inline buffer of any type: a box
//! per rule is a heap allocation per rule per admitted request, where
//! keys of the extractors' types cost none; an inline buffer of any type
//! needs `unsafe`, which this crate forbids. Safe `Any` downcasts to the
//! types below fold to nothing once monomorphised: each kind puts and
//! gets its own type, so the type test is decided at compile time.

use std::any::Any;
use std::net::IpAddr;

use crate::identity::AddrKey;

/// A value of a type its kind knows.
#[derive(Default)]
pub(crate) enum Stash {
    #[default]
    Empty,
    /// `extract::peer_addr`'s key.
    Addr(AddrKey),
    /// `extract::peer_ip`'s and `forwarded`'s.
    Ip(IpAddr),
    /// `extract::header`'s.
    Text(String),
    /// An integer key (an account number), or one key for the whole
    /// server (`|_| Some(())`).
    Word(u64),
    Unit,
    Boxed(Box<dyn Any + Send>),
}

impl Stash {
    /// `value`, inline if its type is one of the above.
    pub(crate) fn put<T: Any + Send>(value: T) -> Stash {
        let mut value = Some(value);
        let any: &mut dyn Any = &mut value;
        if let Some(addr) = any.downcast_mut::<Option<AddrKey>>() {
            return addr.take().map_or(Stash::Empty, Stash::Addr);
        }
        if let Some(ip) = any.downcast_mut::<Option<IpAddr>>() {
            return ip.take().map_or(Stash::Empty, Stash::Ip);
        }
        if let Some(text) = any.downcast_mut::<Option<String>>() {
            return text.take().map_or(Stash::Empty, Stash::Text);
        }
        if let Some(word) = any.downcast_mut::<Option<u64>>() {
            return word.take().map_or(Stash::Empty, Stash::Word);
        }
        if any.is::<Option<()>>() {
            return Stash::Unit;
        }
        value.map_or(Stash::Empty, |value| Stash::Boxed(Box::new(value)))
    }

    /// The value, if it is a `T`: always, for the kind that put it.
    pub(crate) fn get<T: Any>(&self) -> Option<&T> {
        let any: &dyn Any = match self {
            Stash::Empty => return None,
            Stash::Addr(addr) => addr,
            Stash::Ip(ip) => ip,
            Stash::Text(text) => text,
            Stash::Word(word) => word,
            Stash::Unit => &(),
            Stash::Boxed(value) => return value.downcast_ref(),
        };
        any.downcast_ref()
    }

    /// The value, if it is a `T`, for its kind to change.
    pub(crate) fn get_mut<T: Any>(&mut self) -> Option<&mut T> {
        match self {
            Stash::Boxed(value) => value.downcast_mut(),
            Stash::Addr(addr) => (addr as &mut dyn Any).downcast_mut(),
            Stash::Ip(ip) => (ip as &mut dyn Any).downcast_mut(),
            Stash::Text(text) => (text as &mut dyn Any).downcast_mut(),
            Stash::Word(word) => (word as &mut dyn Any).downcast_mut(),
            Stash::Empty | Stash::Unit => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq)]
    struct Account(u32);

    #[test]
    fn every_type_comes_back_as_itself_and_as_no_other() {
        let addr = AddrKey::from(IpAddr::from([192, 0, 2, 7]));
        let stashed = [
            (Stash::put(addr), "addr"),
            (Stash::put(IpAddr::from([192, 0, 2, 8])), "ip"),
            (Stash::put(String::from("acme")), "text"),
            (Stash::put(7_u64), "word"),
            (Stash::put(()), "unit"),
            (Stash::put(Account(9)), "boxed"),
        ];
        for (stash, kind) in &stashed {
            assert_eq!(stash.get::<AddrKey>() == Some(&addr), *kind == "addr");
            assert_eq!(stash.get::<IpAddr>().is_some(), *kind == "ip");
            assert_eq!(
                stash.get::<String>().map(String::as_str) == Some("acme"),
                *kind == "text"
            );
            assert_eq!(stash.get::<u64>() == Some(&7), *kind == "word");
            assert_eq!(stash.get::<()>().is_some(), *kind == "unit");
            assert_eq!(
                stash.get::<Account>() == Some(&Account(9)),
                *kind == "boxed"
            );
            // Inline unless boxed: the extractors' keys cost no allocation.
            assert_eq!(matches!(stash, Stash::Boxed(_)), *kind == "boxed");
        }
        assert!(Stash::Empty.get::<()>().is_none());
    }

    #[test]
    fn a_value_changed_in_place_is_read_back() {
        let mut stash = Stash::put(Account(1));
        if let Some(account) = stash.get_mut::<Account>() {
            account.0 = 2;
        }
        assert_eq!(stash.get::<Account>(), Some(&Account(2)));
        let mut word = Stash::put(3_u64);
        *word.get_mut::<u64>().unwrap() += 1;
        assert_eq!(word.get::<u64>(), Some(&4));
    }
}
