//! The two Lua scripts, one per operation.
//!
//! Hand-written: the state is one GCRA instant per key and each script is a
//! few lines of integer arithmetic, which no Redis rate-limiting crate
//! offers with exact ticks, partial grants and a bounded give-back (the
//! ones that exist, such as `redis-cell`'s `CL.THROTTLE`, are server modules
//! with their own float arithmetic and need the module installed).
//!
//! Every script runs atomically on the server: it reads the server's clock
//! with `TIME`, reads and writes one key, and returns `{code, value, now}`
//! (and, from `acquire`, the tokens left).
//! Numbers are Lua doubles; every value computed stays within `2^53`, where
//! doubles hold integers exactly (the Rust side checks the quota for that,
//! and the scripts refuse to run past `last`).
//!
//! `ARGV` layout, shared by both scripts (all decimal integers):
//!
//! | index | value |
//! |---|---|
//! | 1 | the epoch, Unix seconds |
//! | 2 | `d`, ticks per microsecond |
//! | 3 | `T`, ticks per token |
//! | 4 | `B*T`, a full refill in ticks |
//! | 5 | `last`, the latest `now` (ticks since the epoch) allowed |
//! | 6.. | per script |

/// The shared head of both scripts: arguments, the clock, helpers. A macro
/// so that `concat!` can join it to each body into one `&'static str`.
macro_rules! prelude {
    () => {
        r#"
local epoch = tonumber(ARGV[1])
local d = tonumber(ARGV[2])
local T = tonumber(ARGV[3])
local BT = tonumber(ARGV[4])
local last = tonumber(ARGV[5])
local EXACT = 9007199254740992 -- 2^53

-- Only Redis 3.2 to 4 need this to write after TIME; later versions
-- replicate effects anyway (and keep the function as a no-op, or drop it).
if redis.replicate_commands then redis.replicate_commands() end

-- Now, in ticks since the epoch: whole microseconds times d, exact.
local clock = redis.call('TIME')
local now = ((tonumber(clock[1]) - epoch) * 1000000 + tonumber(clock[2])) * d
if not (now >= 0 and now <= last) then return {-1, 0, 0} end

-- floor(a / b) for integers 0 <= a <= 2^53, b >= 1, exactly: fmod is exact,
-- and dividing the multiple a - fmod(a, b) by b is exact.
local function idiv(a, b) return (a - math.fmod(a, b)) / b end

-- A key holds "<d>:<tat>:<born>": the instant the bucket is full again, in
-- ticks of 1/d microsecond, and the microsecond (since the epoch) the key
-- was created, which tells leases of this state from leases of a state
-- since lost. Returns tat in this store's ticks and born; false when the
-- key is absent (a full bucket); nil when it holds something else. A state
-- written with another tick size (another quota under the same prefix) is
-- converted, rounded up to the microsecond: more debt, never less. A state
-- written before born was kept ("<d>:<tat>") reads as born at 0.
local function load(key)
  local v = redis.call('GET', key)
  if not v then return false end
  local sd, st, born = string.match(v, '^(%d+):(%d+):(%d+)$')
  if not sd then
    sd, st = string.match(v, '^(%d+):(%d+)$')
    born = '0'
  end
  if not sd then return nil end
  sd = tonumber(sd)
  st = tonumber(st)
  born = tonumber(born)
  if sd ~= d then
    if sd < 1 then return nil end
    local us = idiv(st, sd)
    if math.fmod(st, sd) > 0 then us = us + 1 end
    st = us * d
  end
  -- Only a foreign writer gets here; beyond 2^53 is "empty for decades".
  if st > EXACT then st = EXACT end
  return st, born
end

-- Writes the state tat > now, to expire when the bucket is full again (an
-- absent key IS a full bucket, so the expiry loses nothing). '%.0f' prints
-- every integer below 2^53 exactly; tostring would keep 14 digits.
local function save(key, tat, born)
  local unit = 1000 * d
  local ms = idiv(tat - now + unit - 1, unit)
  local state = string.format('%.0f:%.0f:%.0f', d, tat, born)
  redis.call('SET', key, state, 'PX', string.format('%.0f', ms))
end
"#
    };
}

/// `acquire`: `ARGV[6]` is `want`, `1 <= want <= B`.
///
/// Returns `{granted, 0, now, left}` with `granted >= 1` and `left` the
/// whole tokens the bucket still holds after the grant, or
/// `{0, wait, now, 0}` where `wait` is the ticks until one token exists;
/// `{-1, 0, 0}` when the server clock is outside the store's range;
/// `{-2, 0, now}` when the key holds a value this store did not write.
/// (Before `left`, grants were three values: the store refuses that shape
/// as a bad reply rather than guess what is left.)
pub(super) const ACQUIRE: &str = concat!(
    prelude!(),
    r#"
local want = tonumber(ARGV[6])
local tat, born = load(KEYS[1])
if tat == nil then return {-2, 0, now} end
-- An absent key is a full bucket, born now (now is a whole microsecond).
if not tat then born = idiv(now, d) end
-- A state at or before now is a full bucket too.
if not tat or tat < now then tat = now end
-- Refilled credit, in ticks: at most B*T since tat >= now.
local room = now + BT - tat
if room < T then return {0, T - room, now, 0} end
local granted = math.min(want, idiv(room, T))
save(KEYS[1], tat + granted * T, born)
return {granted, 0, now, idiv(room - granted * T, T)}
"#
);

/// `release`: `ARGV[6]` is the grant's `granted` (`<= B`), `ARGV[7]` its
/// time `at`, `ARGV[8]` the `unused` tokens (`1 <= unused <= granted`).
///
/// Moves the state back by `min(unused*T, granted*T - (now - at))`, the
/// one rule of [`docs/semantics.md`](crate::guide::semantics) ("Giving back"), and by nothing when
/// `at` is after `now` (the server clock stepped back: the time held is
/// unknown) or before the key was created (the lease was debited from a
/// state since lost). An absent key is a full bucket: nothing to give back
/// into.
///
/// Returns `{1, returned, now}` with `returned >= 0` the credit given back,
/// in ticks; `{-1, 0, 0}` and `{-2, 0, now}` as for `acquire`.
pub(super) const RELEASE: &str = concat!(
    prelude!(),
    r#"
local granted = tonumber(ARGV[6])
local at = tonumber(ARGV[7])
local unused = tonumber(ARGV[8])
if at > now then return {1, 0, now} end
local owed = math.min(unused * T, granted * T - (now - at))
if owed <= 0 then return {1, 0, now} end
local tat, born = load(KEYS[1])
if tat == nil then return {-2, 0, now} end
if not tat or tat <= now then return {1, 0, now} end
-- A lease granted before this state was born was debited from a state
-- since lost (a restarted or flushed server, an evicted key): giving it
-- back here would hand out tokens this state never debited.
if at < born * d then return {1, 0, now} end
-- Credit above B is clipped: what comes back is at most tat - now.
local returned = math.min(owed, tat - now)
if tat - owed <= now then
  redis.call('DEL', KEYS[1])
else
  save(KEYS[1], tat - owed, born)
end
return {1, returned, now}
"#
);
