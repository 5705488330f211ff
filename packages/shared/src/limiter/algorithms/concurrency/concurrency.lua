--[[
Concurrency ("algorithm": "concurrency"): the twin of model.ts. At most `max` slots held at once; a
slot is a lease, a member of a sorted set scored by its expiry (store clock, ms), so that a gateway
that dies mid-request leaks its slots no longer than their expiry. Live slots are counted with ZCOUNT
(expiry after now), so expired members need no purge to stop counting; they are purged on a denial
(the only time the set is full) and vanish with the key, which expires with its last lease.

Lean by design (issue 16): a take is ZCOUNT, ZADD, PEXPIRE (GT: never shortened by a gateway with a
shorter lease); a give-back is one ZREM. No TYPE check: the key's name (`<limit>:slots`) says it holds
a sorted set (anything else there is a WRONGTYPE error, a STORE_ERROR, never a silent reset).
In a "batch-repeats" call (requests of one batch sharing keys: one client's slots, a cap for everyone),
a key's live leases are counted once and then followed as the call takes and gives back (one clock,
and nothing else runs meanwhile, so the count stays exact), and its expiry is pushed out once per
lease length, and its expired leases are dropped at most once: a hot batch of k takes runs one ZCOUNT,
k ZADD and one PEXPIRE. Takes of a batch in a row on one key (acquire.lua's takeAgain) check their
new lease ids with one ZMSCORE and add them with one ZADD; give-backs in a row remove theirs with one ZREM.

A snippet of acquire.lua that owns its key (`ownsKey`): it reads and writes its sorted set itself
instead of the script's GET/SET of a string state. It registers its factory in ALGORITHMS; its
functions follow acquire.lua's contract ("An algorithm").

ARGV of one check, after the algorithm name and the cost (always 1; arity 2):
  max        most slots held at once; an integer >= 1
  leaseMs    how long the slot is held at most (the taking gateway's UPSTREAM_TIMEOUT_MS + 5 s); > 0
and, among the request's ids (`takesId`: after the values of its last check, see acquire.lua), the
slot's lease id, unique per request. The limit's values are the same for every request on it, so a
batch sends them once ('@<r>') and each request only its key, header and lease id (issue 16: a take
and a give-back sent 20 strings, each parsed, copied into Lua and freed by Redis; now 10).

acquire: admitted iff fewer than max live leases; then ZADD leaseId (now + leaseMs, rounded down to a
whole ms: expiryOf). Level = slots held after the decision; a denial waits 1000 ms (docs/lifecycle.md:
Retry-After: 1); resetMs is 0.
settle (ARGV after the 2 values: delta, admittedAtMs, refundMax; only admittedAtMs is read, to follow a
batch's count): ZREM leaseId; a batch's give-backs of slots taken by one call, in a row, ZREM all their
lease ids at once (settleAgain). Level 0: a give-back does not count what is left (it would cost a
command per request; nothing reads it).
renew (the script's "renew" operation, same ARGV as settle): a live leaseId's expiry becomes
now + leaseMs, rounded down (ZADD XX); an expired one is not taken again (its slot may be another
request's now). Level = live slots held, resetMs 0.
]]
ALGORITHMS['concurrency'] = function()
  -- numbers read so far (see MAX_SPECS_KEPT), by the max's text (see spec)
  local numbers, numbersKept = {}, 0
  local floor = math.floor

  -- A lease's expiry: now + leaseMs at a whole ms, rounded down (the ms its key's PEXPIRE ends at too),
  -- unless that is not after now (a lease shorter than 1 ms). Redis keeps a whole score as an integer,
  -- where a fraction cost it a strtod of every member's score at each insert and a '%.17g' per write.
  -- Twin: leaseExpiryMs (model.ts).
  local function expiryOf(nowMs, leaseMs)
    local at = floor(nowMs + leaseMs)
    if at > nowMs then return at end
    return nowMs + leaseMs
  end
  -- PEXPIRE ... GT needs Redis >= 7 (which is also when scripts see REDIS_VERSION_NUM)
  local hasExpireGt = redis.REDIS_VERSION_NUM ~= nil and redis.REDIS_VERSION_NUM >= 0x070000
  -- ZMSCORE needs Redis >= 6.2; told apart here only from 7 on
  local hasZmscore = hasExpireGt

  -- In a "batch-repeats" call: key -> its live leases now (counted once, then followed), key -> the
  -- lease length this call already made it live for (nil: not known, or the key may be gone), and
  -- key -> true once its expired leases were dropped
  local counted, livesFor, purged
  -- the last lease expiry formatted, and its text (see charge)
  local lastExpiresAt, lastExpiresText
  -- chargeAgain's ZADD arguments (score, member, ...), reused (1..2k set before they are read)
  local zaddMembers = {}
  onCallStart(function()
    if pending then
      counted, livesFor, purged = {}, {}, {}
    else
      counted, livesFor, purged = nil, nil, nil
    end
  end)

  -- live leases: expiry after now
  local function live(key, nowMs)
    if not counted then return redis.call('ZCOUNT', key, '(' .. fmt(nowMs), '+inf') end
    local held = counted[key]
    if held == nil then
      held = redis.call('ZCOUNT', key, '(' .. fmt(nowMs), '+inf')
      counted[key] = held
    end
    return held
  end

  -- the key lives as long as its last lease (at least minTtlMs: tests walking a simulated clock);
  -- `fresh`: no live lease before this one, so nothing lives longer than it
  local function expireWithLease(key, leaseMs, minTtlMs, fresh)
    if livesFor then
      -- on this call's one clock, the key already lives at least this long (and it still exists: a
      -- live lease is in it)
      local already = livesFor[key]
      if already and already >= leaseMs then return end
      livesFor[key] = leaseMs
    end
    local px = leaseMs -- a whole number of ms (the usual lease): Lua writes it exactly by itself
    if not (minTtlMs == 0 and leaseMs % 1 == 0 and leaseMs < 1e14) then
      px = string.format('%.0f', math.ceil(math.max(leaseMs, minTtlMs)))
    end
    if fresh then
      redis.call('PEXPIRE', key, px)
    elseif hasExpireGt then
      redis.call('PEXPIRE', key, px, 'GT')
    elseif redis.call('PTTL', key) < tonumber(px) then
      redis.call('PEXPIRE', key, px)
    end
  end

  -- nothing charged: allowed, level, retryAfterMs, resetMs
  local function hold(_s, _cost, nowMs, allowed, held, key)
    if allowed then return allowed, held, 0, 0 end
    -- full: drop the expired leases (once per key in a "batch-repeats" call: on its one clock, none
    -- expires after that)
    if not counted then
      redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt(nowMs))
    elseif not purged[key] then
      purged[key] = true
      redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt(nowMs))
    end
    return allowed, held, 1000, 0
  end

  return {
    arity = 2,
    ownsKey = true,
    takesId = true, -- the lease id

    spec = function(argv, i)
      -- the two numbers mostly the same from call to call: read once per text, and the limit made
      -- once (nothing writes into it)
      local maxText, leaseText = argv[i], argv[i + 1]
      local known = numbers[maxText]
      if known and known.leaseText == leaseText then return known end
      local max, leaseMs = tonumber(maxText), tonumber(leaseText)
      if not (max and max >= 1 and max == math.floor(max) and max < math.huge
          and leaseMs and leaseMs > 0 and leaseMs < math.huge) then
        return nil
      end
      if numbersKept >= MAX_SPECS_KEPT then numbers, numbersKept = {}, 0 end
      known = { leaseText = leaseText, max = max, leaseMs = leaseMs }
      numbers[maxText], numbersKept = known, numbersKept + 1
      return known
    end,

    -- allowed, then the evaluation for hold or charge: the live slots held, the key
    evaluate = function(s, _cost, key, nowMs)
      local held = live(key, nowMs)
      return held < s.max, held, key
    end,

    hold = hold,

    -- charged (written here): level, resetMs
    charge = function(s, _cost, nowMs, minTtlMs, held, key, _z, leaseId)
      local expiresAt = expiryOf(nowMs, s.leaseMs)
      -- its text from memory: a call's takes of one lease length expire alike (one clock), and fmt's
      -- own memory holds the level formatted in between
      if expiresAt ~= lastExpiresAt then lastExpiresAt, lastExpiresText = expiresAt, fmt(expiresAt) end
      local added = redis.call('ZADD', key, lastExpiresText, leaseId)
      if counted then
        -- a new member is one more live lease, unless its expiry rounds to now (a clock near 2^53 ms);
        -- an id already there may have been an expired one: count again
        if added ~= 1 then
          counted[key] = nil
        elseif expiresAt > nowMs then
          counted[key] = held + 1
        end
      end
      expireWithLease(key, s.leaseMs, minTtlMs, held == 0)
      return held + added, 0
    end,

    -- given back (written here): level (not counted: 0), resetMs
    settle = function(s, _delta, admittedAtMs, key, nowMs, _minTtlMs, _refund, leaseId)
      local removed = redis.call('ZREM', key, leaseId)
      if counted and removed == 1 then
        -- the lease expires at its admission's clock + leaseMs or later (a renewal only pushes it out):
        -- live until then for sure; after that, whether it still counted is not known here
        local held = counted[key]
        if held and admittedAtMs + s.leaseMs > nowMs then held = held - 1 else held = nil end
        counted[key] = held
        -- the last live lease gone: the key itself may be gone, and its expiry with it
        if not (held and held > 0) then livesFor[key] = nil end
      end
      return 0, 0
    end,

    -- k takes in a row (acquire.lua's takeAgain) can be decided together: each lease new, none
    -- repeated, none expiring as it is taken (without ZMSCORE, never)
    takeAgain = function(s, key, nowMs, ids, k)
      if not hasZmscore or expiryOf(nowMs, s.leaseMs) <= nowMs then return false end
      local seen = {}
      for r = 1, k do
        local id = ids[r]
        if seen[id] then return false end
        seen[id] = true
      end
      local scores = redis.call('ZMSCORE', key, unpack(ids, 1, k))
      for r = 1, k do
        if scores[r] then return false end
      end
      return true
    end,

    -- live slots now, and how many more fit (takeAgain)
    room = function(s, key, nowMs)
      local held = live(key, nowMs)
      local free = s.max - held
      if free < 0 then free = 0 end
      return held, free
    end,

    -- of k takes in a row (takeAgain: new leases, live after now), the first `admitted` taken in one
    -- ZADD, the key's expiry pushed once; the rest denied, which drops expired leases when the set is
    -- full for them, as `hold` does
    chargeAgain = function(s, key, nowMs, minTtlMs, held, ids, admitted, k)
      if admitted > 0 then
        local expiresAt = expiryOf(nowMs, s.leaseMs)
        if expiresAt ~= lastExpiresAt then lastExpiresAt, lastExpiresText = expiresAt, fmt(expiresAt) end
        local members = zaddMembers
        for r = 1, admitted do
          members[2 * r - 1], members[2 * r] = lastExpiresText, ids[r]
        end
        local added = redis.call('ZADD', key, unpack(members, 1, 2 * admitted))
        if counted then counted[key] = held + added end
        expireWithLease(key, s.leaseMs, minTtlMs, held == 0)
      end
      if admitted < k then
        local heldThen = held + admitted
        hold(s, 1, nowMs, heldThen < s.max, heldThen, key)
      end
    end,

    -- k given back in a row (acquire.lua's settleAgain), in one ZREM: level, resetMs as settle's
    settleAgain = function(s, admittedAtMs, key, nowMs, ids, k)
      local removed = redis.call('ZREM', key, unpack(ids, 1, k))
      if counted and removed > 0 then
        -- as `settle`, once per lease removed
        local held = counted[key]
        if held and admittedAtMs + s.leaseMs > nowMs then held = held - removed else held = nil end
        counted[key] = held
        if not (held and held > 0) then livesFor[key] = nil end
      end
      return 0, 0
    end,

    -- kept for another leaseMs (written here): level, resetMs
    renew = function(s, _delta, _admittedAtMs, key, nowMs, minTtlMs, _refund, leaseId)
      local expiresAt = redis.call('ZSCORE', key, leaseId)
      if expiresAt and tonumber(expiresAt) > nowMs then
        redis.call('ZADD', key, 'XX', fmt(expiryOf(nowMs, s.leaseMs)), leaseId)
        expireWithLease(key, s.leaseMs, minTtlMs, false)
      end
      return live(key, nowMs), 0
    end,
  }
end
