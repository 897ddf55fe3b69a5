//! The three Lua scripts, one per operation.
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
//! `ARGV` layout, shared by every script (all decimal integers):
//!
//! | index | value |
//! |---|---|
//! | 1 | the epoch, Unix seconds |
//! | 2 | `d`, ticks per microsecond |
//! | 3 | `T`, ticks per `D` tokens |
//! | 4 | `BT`, a full bucket's ticks (`L`; `B*T` when `D = 1`) |
//! | 5 | `last`, the latest `now` (ticks since the epoch) allowed |
//! | 6 | the quota's generation |
//! | 7 | `D`: 1 for a quota charged per token, else per request |
//! | 8 | `B`, the capacity |
//! | 9.. | per script |
//!
//! A key holds `"<d>:<tat>:<born>:<gen>:<T>:<BT>"` (a quota charged per
//! token) or `"<d>:<tat>:<born>:<gen>:<T>:<BT>:<D>:<B>"` (per request): the
//! state and the quota it is kept under, so the store, not its callers, is
//! the authority on a key's quota
//! ([`docs/distributed.md`](crate::guide::distributed), "Changing a
//! quota"). A quota charged per token keeps the six-field form that stores
//! from before per-request quotas read too.

/// The shared head of every script: arguments, the clock, helpers. A macro
/// so that `concat!` can join it to each body into one `&'static str`.
macro_rules! prelude {
    () => {
        r#"
local epoch = tonumber(ARGV[1])
local gen = tonumber(ARGV[6])
local caller = {d = tonumber(ARGV[2]), T = tonumber(ARGV[3]), BT = tonumber(ARGV[4]),
  D = tonumber(ARGV[7]), B = tonumber(ARGV[8])}
local d = caller.d
local last = tonumber(ARGV[5])
local EXACT = 9007199254740992 -- 2^53
local DIVISOR = 4503599627370496 -- 2^52: muldiv divides by less
local MAX_PARTS = 2251799813685248 -- 2^51: the largest D, and B stays below

-- Only Redis 3.2 to 4 need this to write after TIME; later versions
-- replicate effects anyway (and keep the function as a no-op, or drop it).
if redis.replicate_commands then redis.replicate_commands() end

-- floor(a / b) for integers 0 <= a <= 2^53, b >= 1, exactly: fmod is exact,
-- and dividing the multiple a - fmod(a, b) by b is exact.
local function idiv(a, b) return (a - math.fmod(a, b)) / b end

-- floor(a * b / c) and its remainder, for integers 0 <= a, b < 2^53 and
-- 1 <= c < 2^52 whose quotient is below 2^53, exactly, where a * b itself
-- may be past 2^53: long multiplication by the bits of b, from the top,
-- keeping q * c + r = a * (the bits read so far) with r < c. Doubling r
-- and adding a's remainder both stay below 2c < 2^53, and q only grows
-- towards the final quotient. (A quotient past 2^53 comes out past 2^53
-- still, rounding being monotone: only sane() can meet one, and refuses.)
local function muldiv(a, b, c)
  local aq = idiv(a, c)
  local ar = a - aq * c
  local bit = 1
  while bit * 2 <= b do bit = bit * 2 end
  local q, r = 0, 0
  while bit >= 1 do
    q, r = q * 2, r * 2
    if r >= c then q, r = q + 1, r - c end
    if b >= bit then
      b = b - bit
      q, r = q + aq, r + ar
      if r >= c then q, r = q + 1, r - c end
    end
    bit = bit / 2
  end
  return q, r
end

-- A quota q: ticks of 1/q.d us, a token refilling in q.T / q.D ticks,
-- capacity q.B, q.BT the ticks of a full bucket. The ticks charged for
-- k <= B tokens: k * T when D = 1 (charged per token); otherwise, charged
-- per request, BT - floor((B - k) * T / D), what a full bucket holds less
-- what the tokens left behind are worth, rounded down (docs/proofs.md,
-- "Rounding per request"): at least k tokens' exact refill, and BT for B.
local function charge(q, k)
  if q.D == 1 then return k * q.T end
  return q.BT - muldiv(q.B - k, q.T, q.D)
end

-- The most tokens, at most B, whose charge is at most room (0 <= room <=
-- BT): floor(room / T), or, per request, B - ceil((BT - room) * D / T).
local function fit(q, room)
  if q.D == 1 then return idiv(room, q.T) end
  if q.T == 0 then
    if room >= q.BT then return q.B end
    return 0
  end
  local kept, rest = muldiv(q.BT - room, q.D, q.T)
  if rest > 0 then kept = kept + 1 end
  return math.max(q.B - kept, 0)
end

local function whole(x) return x and x >= 0 and x < EXACT and x == math.floor(x) end

-- Whether q makes a quota the scripts can apply exactly: a tick of 1/1 to
-- 1/8 us, a capacity of at least one token, and either whole ticks per
-- token with BT = B * T and BT + T within the exact range, or, per
-- request, T and D within muldiv's bounds, B below 2^51 and BT the ticks
-- of B tokens at T / D rounded up, or one more (the exact interval may
-- exceed T / D by less than a tick over B tokens). Checked for what a
-- caller sends and for what a key holds: neither is trusted.
local function sane(q)
  if not (whole(q.d) and whole(q.T) and whole(q.BT) and whole(q.D) and whole(q.B)) then
    return false
  end
  if not (q.d >= 1 and q.d <= 8 and q.B >= 1 and q.D >= 1) then return false end
  if q.D == 1 then
    return q.T >= 1 and math.fmod(q.BT, q.T) == 0 and idiv(q.BT, q.T) == q.B
      and q.BT + q.T < EXACT
  end
  if not (q.T < DIVISOR and q.D <= MAX_PARTS and q.B < MAX_PARTS and q.BT < DIVISOR) then
    return false
  end
  local least, rest = muldiv(q.B, q.T, q.D)
  if rest > 0 then least = least + 1 end
  return q.BT >= 1 and q.BT >= least and q.BT <= least + 1
end
if not (sane(caller) and whole(gen)) then
  return {-4, 0, 0}
end

-- Whether q is the caller's quota: then it is sane, and its charge for one
-- token is known (per request, each charge is a muldiv, the scripts'
-- costliest step).
local function same(q)
  return q.d == caller.d and q.T == caller.T and q.BT == caller.BT and q.D == caller.D
    and q.B == caller.B
end
local caller_one = charge(caller, 1)
local function charge_one(q)
  if same(q) then return caller_one end
  return charge(q, 1)
end

-- Now, in whole microseconds since the epoch, and in this caller's ticks.
local clock = redis.call('TIME')
local now_us = (tonumber(clock[1]) - epoch) * 1000000 + tonumber(clock[2])
local now = now_us * d
if not (now >= 0 and now <= last and now + caller.BT + caller_one <= EXACT) then
  return {-1, 0, 0}
end
-- Replies tell the time in whole microseconds, which mean the same to
-- every quota: a lease granted under one tick size may be given back by a
-- node that has changed to another.

-- The quota fields of s, copied from q.
local function keep(s, q)
  s.d, s.T, s.BT, s.D, s.B = q.d, q.T, q.BT, q.D, q.B
  return s
end

-- The state of a key: tat in ticks of 1/s.d us, born (the microsecond the
-- state began: leases from before it were debited from another state),
-- and the quota (gen, d, T, BT, D, B) it is kept under. Returns false when
-- the key is absent (a full bucket); nil when it holds something else.
-- Six fields are a quota charged per token (D = 1, B = BT / T). A state
-- written before quotas were stored ("<d>:<tat>:<born>", or "<d>:<tat>"
-- before born) is read as kept under the caller's quota at generation 0,
-- its tat converted to the caller's tick rounded up to the microsecond:
-- more debt, never less.
local function load(key)
  local v = redis.call('GET', key)
  if not v then return false end
  local s = {}
  -- One match for the six fields every current state starts with; the
  -- two more of a quota charged per request, if any, from the rest.
  local sd, st, born, sg, sT, sBT, rest =
    string.match(v, '^(%d+):(%d+):(%d+):(%d+):(%d+):(%d+)(.*)$')
  local sD, sB = '1', nil
  if rest and rest ~= '' then
    sD, sB = string.match(rest, '^:(%d+):(%d+)$')
    if not sD then return nil end
  end
  if sd then
    s.d, s.tat, s.born = tonumber(sd), tonumber(st), tonumber(born)
    s.gen, s.T, s.BT, s.D = tonumber(sg), tonumber(sT), tonumber(sBT), tonumber(sD)
    if sB then
      s.B = tonumber(sB)
    elseif s.T >= 1 then
      s.B = idiv(s.BT, s.T)
    end
    if not ((same(s) or sane(s)) and whole(s.gen)) then return nil end
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
    s.tat, s.born, s.gen = st, tonumber(born), 0
    keep(s, caller)
  end
  -- Only a foreign writer gets here; beyond 2^53 is "empty for decades".
  if s.tat > EXACT then s.tat = EXACT end
  return s
end

-- The continuity rule of docs/semantics.md ("Changing a quota"), at now_us:
-- whole tokens available under the old quota carry over, clipped to the
-- new capacity (the fraction of the next token is dropped: never more); a
-- debt (tat past now + BT, the next token further than one interval)
-- carries over as the instant it is paid, rounded up to the microsecond.
-- Returns the tat in the new quota n's ticks: full if every token carries
-- over, else a bucket that was full and has just been charged for the
-- tokens not carried (the in-process initial credit's rule), which per
-- request holds a little less than the carried tokens' charge: never more
-- credit than they are worth.
local function convert(s, n)
  local snow = now_us * s.d
  local paid = s.tat - s.BT
  local nnow = now_us * n.d
  if paid > snow then
    local us = idiv(paid, s.d)
    if math.fmod(paid, s.d) > 0 then us = us + 1 end
    -- A debt past the exact range (a settled excess of decades) stays
    -- there, clamped as load clamps it.
    return math.min(us * n.d + n.BT, EXACT)
  end
  local tat = math.max(s.tat, snow)
  local tokens = math.min(fit(s, snow + s.BT - tat), n.B)
  if tokens == n.B then return nnow end
  return nnow + charge(n, n.B - tokens)
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
  if s.D ~= 1 then state = state .. string.format(':%.0f:%.0f', s.D, s.B) end
  redis.call('SET', key, state, 'PX', string.format('%.0f', ms))
end

-- The key's state as this caller decides on it, with whether it changed
-- here: an absent key is a full bucket, born now, under the caller's
-- quota, holding at most fresh tokens (as a full bucket from which the
-- others were just admitted: charge(caller, k) <= BT, within the range);
-- a state of an older generation is converted to the caller's quota and
-- born now (a lease granted before this microsecond was debited under the
-- old quota and is not given back under this one; one granted in this
-- microsecond was debited from the state converted here, which held no
-- refill of the old quota since: returning it never mints). Or nil and
-- the reply: a value no store wrote, or a quota of the caller's generation
-- that is not the caller's.
local function current(fresh)
  local s = load(KEYS[1])
  if s == nil then return nil, false, {-2, 0, now_us} end
  if not s then
    local tat = now
    if fresh < caller.B then tat = now + charge(caller, caller.B - fresh) end
    return keep({tat = tat, born = now_us, gen = gen}, caller), false
  end
  if s.gen < gen then
    s.tat = convert(s, caller)
    keep(s, caller)
    s.gen, s.born = gen, now_us
    return s, true
  end
  if s.gen == gen and not same(s) then return nil, false, {-3, s.gen, now_us} end
  return s, false
end
"#
    };
}

/// `acquire`: `ARGV[9]` is `want`, `1 <= want <= B`; `ARGV[10]` is
/// `fresh`, the most tokens an absent key starts with (clipped to `B`).
///
/// An absent key is a full bucket, but one that expired full under a
/// smaller quota than the caller's was full of less: the caller, which
/// knows the quotas it changed from, sends what such a key would have
/// carried to now (`RedisStore`'s `expired` bucket), and the key starts
/// with no more.
///
/// Decides under the key's stored quota, after converting the state to
/// the caller's quota if the caller's generation is newer (the state's
/// `born` then moves past now: leases from before the change are not given
/// back). A caller on an older generation is decided under the stored,
/// newer one.
///
/// Returns `{granted, 0, now, left, gen, B, d, T, D}` with `granted >= 1`,
/// `left` the whole tokens the bucket still holds after the grant, and the
/// quota decided under (its generation, capacity, and ticks of `1/d` µs
/// per token, `T / D`); or `{0, wait, now, 0, gen, B, d, T, D}` where
/// `wait` is the microseconds until one token exists, rounded up. `now` is
/// in whole microseconds since the epoch. `{-1, 0, 0}` when the server
/// clock is outside the range; `{-2, 0, now}` when the key holds a value
/// this store did not write; `{-3, gen, now}` when the key is kept under
/// another quota of the caller's generation; `{-4, 0, 0}` for arguments no
/// store sends.
pub(super) const ACQUIRE: &str = concat!(
    prelude!(),
    r#"
local want = tonumber(ARGV[9])
if not (want and want >= 1 and want == math.floor(want)) then return {-4, 0, 0} end
local fresh = tonumber(ARGV[10])
if not whole(fresh) then return {-4, 0, 0} end
local s, converted, refused = current(fresh)
if not s then return refused end
local snow = now_us * s.d
local one = charge_one(s)
if snow + s.BT + one > EXACT then return {-1, 0, 0} end
-- A state at or before now is a full bucket.
if s.tat < snow then s.tat = snow end
-- Refilled credit, in ticks: at most BT since tat >= now.
local room = snow + s.BT - s.tat
if room < one then
  local wait_us = idiv(one - room + s.d - 1, s.d)
  if converted then save(KEYS[1], s) end
  return {0, wait_us, now_us, 0, s.gen, s.B, s.d, s.T, s.D}
end
local granted = math.min(want, fit(s, room))
local cost = charge(s, granted)
s.tat = s.tat + cost
save(KEYS[1], s)
return {granted, 0, now_us, fit(s, room - cost), s.gen, s.B, s.d, s.T, s.D}
"#
);

/// `release`: `ARGV[9]` is the grant's `granted` (`<= B`), `ARGV[10]` its
/// time `at` (the microsecond its acquire replied), `ARGV[11]` the `unused`
/// tokens (`1 <= unused <= granted`).
///
/// Decided under the key's stored quota whatever the caller's: a lease of
/// the current state was granted under it. Moves the state back by
/// `min(c(granted) - c(granted - unused), c(granted) - (now - at))`, where
/// `c` is the quota's charge (`k * T` per token; `c(0)` counts as 0), the
/// one rule of
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
local granted = tonumber(ARGV[9])
local at = tonumber(ARGV[10])
local unused = tonumber(ARGV[11])
if not (whole(granted) and whole(at) and whole(unused)) then
  return {-4, 0, 0}
end
local at_us = at
if at_us > now_us then return {1, 0, now_us} end
local s = load(KEYS[1])
if s == nil then return {-2, 0, now_us} end
if not s then return {1, 0, now_us} end
local snow = now_us * s.d
if snow + s.BT + charge_one(s) > EXACT then return {-1, 0, 0} end
if s.tat <= snow then return {1, 0, now_us} end
-- A lease granted before this state was born was debited from a state
-- since lost (a restarted or flushed server, an evicted key) or kept under
-- an earlier quota: giving it back here would hand out tokens this state
-- never debited.
if at_us < s.born then return {1, 0, now_us} end
granted = math.min(granted, s.B)
unused = math.min(unused, granted)
-- At most what charging only the rest would have saved (all of the
-- charge when all of it comes back: per request, charges are not
-- proportional), and at most the charge less the time held.
local cost = charge(s, granted)
local saved = cost
if unused < granted then saved = cost - charge(s, granted - unused) end
local owed = math.min(saved, cost - (snow - at_us * s.d))
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

/// `debit`: `ARGV[9]` is the `tokens` to charge (`1 <= tokens < 2^53`),
/// `ARGV[10]` `fresh` as for `acquire`.
///
/// Charges the key's bucket whether or not the tokens fit: the excess of a
/// cost settled above what was taken for it. The state is found as
/// `acquire` finds it (`current` in the prelude: an absent key full,
/// holding at most `fresh`; an older generation's converted first). Then `tat = max(tat, now) + ceil(tokens * T / D)`, capped
/// at the exact range (a debt of decades either way): a debt that every
/// node's grants wait out, since no grant is made while `tat` lies beyond
/// `now + BT`.
///
/// Returns `{1, 0, now}`; `{-1, 0, 0}`, `{-2, 0, now}`, `{-3, gen, now}`
/// and `{-4, 0, 0}` as for `acquire`.
pub(super) const DEBIT: &str = concat!(
    prelude!(),
    r#"
local tokens = tonumber(ARGV[9])
if not (whole(tokens) and tokens >= 1) then return {-4, 0, 0} end
local fresh = tonumber(ARGV[10])
if not whole(fresh) then return {-4, 0, 0} end
local s, _, refused = current(fresh)
if not s then return refused end
local snow = now_us * s.d
if snow + s.BT + charge_one(s) > EXACT then return {-1, 0, 0} end
if s.tat < snow then s.tat = snow end
-- A debt past the exact range is "for decades" whatever its size: the
-- tokens are clamped so that the charge stays within it.
tokens = math.min(tokens, idiv(EXACT, s.T) * s.D)
local debt, rest = muldiv(tokens, s.T, s.D)
if rest > 0 then debt = debt + 1 end
s.tat = math.min(s.tat + debt, EXACT)
save(KEYS[1], s)
return {1, 0, now_us}
"#
);
