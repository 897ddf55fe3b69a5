//! One script call: an `EVALSHA` by the script's hash, with the arguments
//! every call shares in the order `lua.rs` reads them, and its reply
//! decoded into integers or into the error its code stands for.

use ::redis::{Cmd, Script, Value};

use super::error::RedisStoreError;
use super::lua;
use super::redis_store::{RedisStore, Setting};
use super::scale::EPOCH_UNIX_SECS;
use crate::sync::unmodelled::LazyLock;

// Loaded by hash: each call is an EVALSHA and, on a NOSCRIPT reply (a
// restarted or flushed server), the script is loaded and the call sent once
// more (`connection.rs`).
pub(super) static ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(lua::ACQUIRE));
pub(super) static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(lua::RELEASE));
pub(super) static DEBIT: LazyLock<Script> = LazyLock::new(|| Script::new(lua::DEBIT));

impl RedisStore {
    /// One `EVALSHA` of `script` on `key` with the shared arguments of
    /// `setting` and `extra`.
    pub(super) fn call(&self, setting: &Setting, script: &Script, key: &str, extra: &[u64]) -> Cmd {
        let mut call = ::redis::cmd("EVALSHA");
        call.arg(script.get_hash())
            .arg(1)
            .arg(self.redis_key(key))
            .arg(EPOCH_UNIX_SECS)
            .arg(setting.scale.ticks_per_micro)
            .arg(setting.scale.token_ticks)
            .arg(setting.scale.tolerance)
            .arg(setting.scale.last_tick)
            .arg(setting.generation)
            .arg(setting.scale.token_parts)
            .arg(setting.scale.capacity);
        for &value in extra {
            call.arg(value);
        }
        call
    }

    /// Runs one of the scripts on `key` with the shared arguments and
    /// `extra`, bounded by the timeout, and checks the reply's shape: `N`
    /// values (9 from `acquire`, 3 from `release`).
    pub(super) async fn run<const N: usize>(
        &self,
        setting: &Setting,
        script: &Script,
        key: &str,
        extra: &[u64],
    ) -> Result<[u64; N], RedisStoreError> {
        let call = self.call(setting, script, key, extra);
        let reply = self.connection.eval(script, &call, self.timeout).await?;
        self.decode(key, &reply)
    }

    /// A script's reply, `N` non-negative integers (`{code, value, now}`,
    /// then `acquire`'s tokens left and quota), or the error its code
    /// stands for.
    pub(super) fn decode<const N: usize>(
        &self,
        key: &str,
        reply: &Value,
    ) -> Result<[u64; N], RedisStoreError> {
        let values = parse_reply(reply)?;
        // The scripts' own error replies have one shape for both scripts.
        match values.first() {
            Some(-1) => return Err(RedisStoreError::ServerClockOutOfRange),
            Some(-2) => return Err(RedisStoreError::ForeignValue(self.redis_key(key))),
            Some(-3) => {
                return Err(RedisStoreError::QuotaConflict {
                    key: self.redis_key(key),
                    generation: values.get(1).map_or(0, |&g| g.unsigned_abs()),
                });
            }
            Some(-4) => return Err(bad_reply(reply)),
            _ => {}
        }
        let unsigned: Vec<u64> = values
            .iter()
            .map(|&v| u64::try_from(v))
            .collect::<Result<_, _>>()
            .map_err(|_| bad_reply(reply))?;
        // A reply of another length is another script version's (the
        // three or four values of an acquire before it told the quota).
        <[u64; N]>::try_from(unsigned).map_err(|_| bad_reply(reply))
    }
}

/// A script's reply: a non-empty array of integers.
pub(super) fn parse_reply(reply: &Value) -> Result<Vec<i64>, RedisStoreError> {
    let Value::Array(items) = reply else {
        return Err(bad_reply(reply));
    };
    let numbers: Option<Vec<i64>> = items
        .iter()
        .map(|item| match item {
            Value::Int(n) => Some(*n),
            _ => None,
        })
        .collect();
    numbers
        .filter(|n| !n.is_empty())
        .ok_or_else(|| bad_reply(reply))
}

fn bad_reply(reply: &Value) -> RedisStoreError {
    RedisStoreError::BadReply(format!("{reply:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_of_the_wrong_shape_are_bad_replies() {
        let ok = Value::Array(vec![Value::Int(1), Value::Int(0), Value::Int(7)]);
        assert_eq!(parse_reply(&ok).unwrap(), [1, 0, 7]);
        for reply in [
            Value::Nil,
            Value::Int(3),
            Value::Array(vec![]),
            Value::Array(vec![Value::Int(1), Value::Nil, Value::Int(0)]),
        ] {
            assert!(matches!(
                parse_reply(&reply),
                Err(RedisStoreError::BadReply(_))
            ));
        }
    }

    #[test]
    fn the_scripts_read_their_arguments_where_the_store_puts_them() {
        for script in [lua::ACQUIRE, lua::RELEASE, lua::DEBIT] {
            let names = ["epoch", "d", "T", "BT", "last", "gen", "D", "B"];
            for (i, name) in names.iter().enumerate() {
                let line = format!("{name} = tonumber(ARGV[{}])", i + 1);
                assert!(script.contains(&line), "{line}");
            }
        }
        assert!(lua::ACQUIRE.contains("local want = tonumber(ARGV[9])"));
        assert!(lua::ACQUIRE.contains("local fresh = tonumber(ARGV[10])"));
        assert!(lua::RELEASE.contains("local granted = tonumber(ARGV[9])"));
        assert!(lua::RELEASE.contains("local at = tonumber(ARGV[10])"));
        assert!(lua::RELEASE.contains("local unused = tonumber(ARGV[11])"));
        assert!(lua::DEBIT.contains("local tokens = tonumber(ARGV[9])"));
        assert!(lua::DEBIT.contains("local fresh = tonumber(ARGV[10])"));
    }
}
