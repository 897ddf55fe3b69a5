//! The two Lua scripts, one per operation.
//!
//! Hand-written: the state is one GCRA instant per key and each script is a
//! few lines of integer arithmetic, which no Redis rate-limiting crate
//! offers with exact ticks, partial grants, a bounded give-back and quota
//! changes carried over by a rule (the ones that exist, such as
//! `redis-cell`'s `CL.THROTTLE`, are server modules with their own float
//! arithmetic and need the module installed).
//!
//! Every script runs atomically on the server: it reads the server's clock
//! with `TIME`, reads and writes one key, and returns `{code, value, now}`
//! (and, from `acquire`, the tokens left and the quota it decided under).
//! Numbers are Lua doubles; every value computed stays within `2^53`, where
//! doubles hold integers exactly (the Rust side checks the quota for that,
//! and the scripts check every quota they are sent or read again, and
//! refuse to run past the range).
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
//! | 6 | the quota's generation |
//! | 7.. | per script |
//!
//! A key holds `"<d>:<tat>:<born>:<gen>:<T>:<BT>"`: the state and the quota
//! it is kept under, so the store, not its callers, is the authority on a
//! key's quota ([`docs/distributed.md`](crate::guide::distributed),
//! "Changing a quota").

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
local gen = tonumber(ARGV[6])
local EXACT = 9007199254740992 -- 2^53

-- Only Redis 3.2 to 4 need this to write after TIME; later versions
-- replicate effects anyway (and keep the function as a no-op, or drop it).
if redis.replicate_commands then redis.replicate_commands() end

-- floor(a / b) for integers 0 <= a <= 2^53, b >= 1, exactly: fmod is exact,
-- and dividing the multiple a - fmod(a, b) by b is exact.
local function idiv(a, b) return (a - math.fmod(a, b)) / b end

-- Whether d, T, BT make a quota the scripts can apply exactly: a tick of
-- 1/1 to 1/8 us, a whole number of tokens, and a full refill plus a token
-- within the exact range. Checked for what a caller sends and for what a
-- key holds: neither is trusted.
local function sane(qd, qT, qBT)
  return qd and qT and qBT and qd >= 1 and qd <= 8 and qd == math.floor(qd)
    and qT >= 1 and qT == math.floor(qT) and qBT >= qT and qBT + qT < EXACT
    and math.fmod(qBT, qT) == 0
end
if not (sane(d, T, BT) and gen and gen >= 0 and gen < EXACT and gen == math.floor(gen)) then
  return {-4, 0, 0}
end

-- Now, in whole microseconds since the epoch, and in this caller's ticks.
local clock = redis.call('TIME')
local now_us = (tonumber(clock[1]) - epoch) * 1000000 + tonumber(clock[2])
local now = now_us * d
if not (now >= 0 and now <= last and now + BT + T <= EXACT) then return {-1, 0, 0} end
-- Replies tell the time in whole microseconds, which mean the same to
-- every quota: a lease granted under one tick size may be given back by a
-- node that has changed to another.

-- The state of a key: tat in ticks of 1/qd us, born (the microsecond the
-- state began: leases from before it were debited from another state),
-- and the quota (gen, qd, qT, qBT) it is kept under. Returns false when
-- the key is absent (a full bucket); nil when it holds something else.
-- A state written before quotas were stored ("<d>:<tat>:<born>", or
-- "<d>:<tat>" before born) is read as kept under the caller's quota at
-- generation 0, its tat converted to the caller's tick rounded up to the
-- microsecond: more debt, never less.
local function load(key)
  local v = redis.call('GET', key)
  if not v then return false end
  local s = {}
  local sd, st, born, sg, sT, sBT =
    string.match(v, '^(%d+):(%d+):(%d+):(%d+):(%d+):(%d+)$')
  if sd then
    s.d, s.tat, s.born = tonumber(sd), tonumber(st), tonumber(born)
    s.gen, s.T, s.BT = tonumber(sg), tonumber(sT), tonumber(sBT)
    if not sane(s.d, s.T, s.BT) or s.gen >= EXACT then return nil end
  else
    sd, st, born = string.match(v, '^(%d+):(%d+):(%d+)$')
    if not sd then
      sd, st = string.match(v, '^(%d+):(%d+)$')
      born = '0'
    end
    if not sd then return nil end
    sd = tonumber(sd)
    st = tonumber(st)
    if sd < 1 then return nil end
    if sd ~= d then
      local us = idiv(st, sd)
      if math.fmod(st, sd) > 0 then us = us + 1 end
      st = us * d
    end
    s.d, s.tat, s.born, s.gen, s.T, s.BT = d, st, tonumber(born), 0, T, BT
  end
  -- Only a foreign writer gets here; beyond 2^53 is "empty for decades".
  if s.tat > EXACT then s.tat = EXACT end
  return s
end

-- The continuity rule of docs/semantics.md ("Changing a quota"), at now_us:
-- whole tokens available under the old quota carry over, clipped to the
-- new capacity (the fraction of the next token is dropped: never more); a
-- debt (tat past now + B*T, the next token further than one interval)
-- carries over as the instant it is paid, rounded up to the microsecond.
-- Returns the tat in the new quota's ticks.
local function convert(s, nd, nT, nBT)
  local snow = now_us * s.d
  local paid = s.tat - s.BT
  local nnow = now_us * nd
  if paid > snow then
    local us = idiv(paid, s.d)
    if math.fmod(paid, s.d) > 0 then us = us + 1 end
    return us * nd + nBT
  end
  local tat = math.max(s.tat, snow)
  local tokens = math.min(idiv(snow + s.BT - tat, s.T), idiv(nBT, nT))
  return nnow + nBT - tokens * nT
end

-- Writes the state, to expire when the bucket is full again (an absent key
-- IS a full bucket, so the expiry loses nothing) -- but a state kept under
-- a changed quota (generation above 0) is kept for at least a day, so that
-- a node not yet told of the change cannot recreate the key under its old
-- quota as soon as the bucket refills. '%.0f' prints every integer below
-- 2^53 exactly; tostring would keep 14 digits.
local function save(key, s)
  local unit = 1000 * s.d
  local ms = idiv(s.tat - now_us * s.d + unit - 1, unit)
  if s.gen > 0 then ms = math.max(ms, 86400000) end
  local state = string.format('%.0f:%.0f:%.0f:%.0f:%.0f:%.0f',
    s.d, s.tat, s.born, s.gen, s.T, s.BT)
  redis.call('SET', key, state, 'PX', string.format('%.0f', ms))
end
"#
    };
}

/// `acquire`: `ARGV[7]` is `want`, `1 <= want <= B`.
///
/// Decides under the key's stored quota, after converting the state to
/// the caller's quota if the caller's generation is newer (the state's
/// `born` then moves past now: leases from before the change are not given
/// back). A caller on an older generation is decided under the stored,
/// newer one.
///
/// Returns `{granted, 0, now, left, gen, B, refill}` with `granted >= 1`,
/// `left` the whole tokens the bucket still holds after the grant, and the
/// quota decided under (its generation, capacity and nanoseconds per
/// token, rounded up); or `{0, wait, now, 0, gen, B, refill}` where `wait`
/// is the microseconds until one token exists, rounded up. `now` is in
/// whole microseconds since the epoch. `{-1, 0, 0}` when the server clock is outside the
/// range; `{-2, 0, now}` when the key holds a value this store did not
/// write; `{-3, gen, now}` when the key is kept under another quota of the
/// caller's generation; `{-4, 0, 0}` for arguments no store sends.
pub(super) const ACQUIRE: &str = concat!(
    prelude!(),
    r#"
local want = tonumber(ARGV[7])
if not (want and want >= 1 and want == math.floor(want)) then return {-4, 0, 0} end
local s = load(KEYS[1])
local converted = false
if s == nil then return {-2, 0, now_us} end
if not s then
  -- An absent key is a full bucket, born now, under the caller's quota.
  s = {d = d, tat = now, born = now_us, gen = gen, T = T, BT = BT}
elseif s.gen < gen then
  s.tat = convert(s, d, T, BT)
  converted = true
  -- Born now: a lease granted before this microsecond was debited under
  -- the old quota and is not given back under this one (one granted in
  -- this microsecond was debited from the state converted here, which
  -- held no refill of the old quota since: returning it never mints).
  s.d, s.T, s.BT, s.gen, s.born = d, T, BT, gen, now_us
elseif s.gen == gen and (s.d ~= d or s.T ~= T or s.BT ~= BT) then
  return {-3, s.gen, now_us}
end
local snow = now_us * s.d
if snow + s.BT + s.T > EXACT then return {-1, 0, 0} end
local B = idiv(s.BT, s.T)
local refill = idiv(s.T * 1000 + s.d - 1, s.d)
-- A state at or before now is a full bucket.
if s.tat < snow then s.tat = snow end
-- Refilled credit, in ticks: at most B*T since tat >= now.
local room = snow + s.BT - s.tat
if room < s.T then
  local wait_us = idiv(s.T - room + s.d - 1, s.d)
  if converted then save(KEYS[1], s) end
  return {0, wait_us, now_us, 0, s.gen, B, refill}
end
local granted = math.min(want, idiv(room, s.T))
s.tat = s.tat + granted * s.T
save(KEYS[1], s)
return {granted, 0, now_us, idiv(room - granted * s.T, s.T), s.gen, B, refill}
"#
);

/// `release`: `ARGV[7]` is the grant's `granted` (`<= B`), `ARGV[8]` its
/// time `at` (the microsecond its acquire replied), `ARGV[9]` the `unused` tokens
/// (`1 <= unused <= granted`).
///
/// Decided under the key's stored quota whatever the caller's: a lease of
/// the current state was granted under it. Moves the state back by
/// `min(unused*T, granted*T - (now - at))`, the one rule of
/// [`docs/semantics.md`](crate::guide::semantics) ("Giving back"), and by
/// nothing when `at` is after `now` (the server clock stepped back: the
/// time held is unknown) or before the state was born (the lease was
/// debited from a state since lost, or before a quota change). An absent
/// key is a full bucket: nothing to give back into.
///
/// Returns `{1, returned, now}` with `returned >= 0` the credit given back,
/// in the stored quota's ticks; `{-1, 0, 0}`, `{-2, 0, now}` and
/// `{-4, 0, 0}` as for `acquire`.
pub(super) const RELEASE: &str = concat!(
    prelude!(),
    r#"
local granted = tonumber(ARGV[7])
local at = tonumber(ARGV[8])
local unused = tonumber(ARGV[9])
if not (granted and at and unused and granted >= 0 and at >= 0 and unused >= 0) then
  return {-4, 0, 0}
end
local at_us = math.floor(at)
if at_us > now_us then return {1, 0, now_us} end
local s = load(KEYS[1])
if s == nil then return {-2, 0, now_us} end
if not s then return {1, 0, now_us} end
local snow = now_us * s.d
if snow + s.BT + s.T > EXACT then return {-1, 0, 0} end
if s.tat <= snow then return {1, 0, now_us} end
-- A lease granted before this state was born was debited from a state
-- since lost (a restarted or flushed server, an evicted key) or kept under
-- an earlier quota: giving it back here would hand out tokens this state
-- never debited.
if at_us < s.born then return {1, 0, now_us} end
local B = idiv(s.BT, s.T)
granted = math.min(granted, B)
unused = math.min(unused, granted)
local owed = math.min(unused * s.T, granted * s.T - (snow - at_us * s.d))
if owed <= 0 then return {1, 0, now_us} end
-- Credit above B is clipped: what comes back is at most tat - now.
local returned = math.min(owed, s.tat - snow)
if s.tat - owed <= snow and s.gen == 0 then
  redis.call('DEL', KEYS[1])
elseif s.tat - owed <= snow then
  s.tat = snow
  save(KEYS[1], s)
else
  s.tat = s.tat - owed
  save(KEYS[1], s)
end
return {1, returned, now_us}
"#
);
