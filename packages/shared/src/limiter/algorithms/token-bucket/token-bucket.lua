--[[
Token bucket (rule format v1, and "algorithm": "token-bucket"): the twin of model.ts. Same
IEEE-754 double operations in the same order, so Redis and the in-process store give bit-identical
answers. Change one, change the other (the differential test compares them).

A snippet of acquire.lua (spliced in where it says so when the script is loaded): it registers the
algorithm in ALGORITHMS and uses the script's helpers (waitMs, fmt).

ARGV of one check, after the algorithm name and the cost (arity 5):
  capacity   most tokens the bucket holds; > 0
  refill     tokens gained every period, continuously; > 0
  periodMs   refill period in milliseconds; > 0
  maxDebt    how far below zero an admitted request may take the balance; >= 0
  tag        "T<capacity>/<refill>/<periodMs>" (state-tag.ts): the numbers the state is written under

settle (ARGV after the 5 values: delta, admittedAtMs, refundMax): the balance brought up to now, minus delta
(more: charged on top, even below -maxDebt; less: given back), never above capacity. A state written
under another tag (the limit was edited since the admission) is left alone: the settlement is dropped.
A refund gives back at most what refund.max leaves per period (grantRefund in acquire.lua).

State: the string "<balance> <updatedAtMs> <tag>", the numbers '%.17g' (exact round trip). It matters
until the bucket is full again, so that is its time to live: a bucket that would sit full expires and
idle clients cost nothing. Absent, or unreadable (another algorithm's state) = a full bucket. Written
under another tag (an edit): the balance stands, but owes at most the new maxDebt. "<balance>
<updatedAtMs>" (written before tags) counts as written under another tag.
]]
ALGORITHMS['token-bucket'] = (function()
  -- specs read in this call (the script's body runs afresh on every call), by tag
  local specs = {}

  -- docs/limits.md: admitted iff b >= min(c, 1) and b - c >= -maxDebt
  local function admits(b, cost, maxDebt)
    return b >= math.min(cost, 1) and b - cost >= -maxDebt
  end

  -- elapsed * refill / periodMs, never elapsed * (refill / periodMs): see model.ts
  local function refilled(balance, updatedAtMs, s, atMs)
    local elapsedMs = atMs - updatedAtMs
    if not (elapsedMs > 0) then elapsedMs = 0 end -- a clock going backwards refills nothing
    return math.min(balance + elapsedMs * s.refill / s.periodMs, s.capacity)
  end

  local function untilFullMs(balance, updatedAtMs, s, nowMs)
    return waitMs(
      function(x) return refilled(balance, updatedAtMs, s, nowMs + x) >= s.capacity end,
      (s.capacity - refilled(balance, updatedAtMs, s, nowMs)) / (s.refill / s.periodMs))
  end

  -- balance, updatedAtMs, tag ('' written before tags); nil for nothing or another algorithm's state
  local function parseState(stored)
    if not stored then return nil end
    local a = string.find(stored, ' ', 1, true)
    if not a then return nil end
    local b = string.find(stored, ' ', a + 1, true)
    local updatedAtMs, tag
    if b then
      if string.byte(stored, b + 1) ~= 84 then return nil end -- not 'T': another algorithm's tag
      updatedAtMs = tonumber(string.sub(stored, a + 1, b - 1))
      tag = string.sub(stored, b + 1)
    else
      updatedAtMs = tonumber(string.sub(stored, a + 1))
      tag = ''
    end
    local balance = tonumber(string.sub(stored, 1, a - 1))
    if balance and updatedAtMs then return balance, updatedAtMs, tag end
    return nil
  end

  return {
    arity = 5,

    spec = function(argv, i)
      -- the requests of a batch mostly share their limits: one spec per tag and call, its numbers
      -- read once (a hit compares the argument strings, which Lua interns: pointer comparisons)
      local known = specs[argv[i + 4]]
      if known and known.texts[1] == argv[i] and known.texts[2] == argv[i + 1]
          and known.texts[3] == argv[i + 2] and known.texts[4] == argv[i + 3] then
        return known
      end
      local s = {
        capacity = tonumber(argv[i]), refill = tonumber(argv[i + 1]),
        periodMs = tonumber(argv[i + 2]), maxDebt = tonumber(argv[i + 3]), tag = argv[i + 4],
        texts = { argv[i], argv[i + 1], argv[i + 2], argv[i + 3] },
      }
      if s.capacity and s.capacity > 0 and s.capacity < math.huge
          and s.refill and s.refill > 0 and s.refill < math.huge
          and s.periodMs and s.periodMs > 0 and s.periodMs < math.huge
          and s.maxDebt and s.maxDebt >= 0 and s.maxDebt < math.huge
          and s.tag and string.byte(s.tag, 1) == 84 then
        specs[s.tag] = s
        return s
      end
      return nil
    end,

    evaluate = function(s, cost, stored, nowMs)
      local balance, updatedAtMs, tag = parseState(stored)
      if not balance then
        balance = s.capacity
        updatedAtMs = nowMs
      elseif tag ~= s.tag and balance < -s.maxDebt then
        balance = -s.maxDebt -- edited: a debt beyond the new maxDebt is forgiven
      end
      local b = refilled(balance, updatedAtMs, s, nowMs)
      local allowed = admits(b, cost, s.maxDebt)
      return {
        allowed = allowed,

        -- nothing charged: allowed, level, retryAfterMs, resetMs
        hold = function()
          local resetMs = untilFullMs(balance, updatedAtMs, s, nowMs)
          local retryAfterMs = 0
          if not allowed then
            retryAfterMs = resetMs -- never admissible: cost > capacity + maxDebt, or capacity < 1 <= cost
            if admits(s.capacity, cost, s.maxDebt) then
              local needed = math.max(math.min(cost, 1), cost - s.maxDebt)
              retryAfterMs = waitMs(
                function(x) return admits(refilled(balance, updatedAtMs, s, nowMs + x), cost, s.maxDebt) end,
                (needed - b) / (s.refill / s.periodMs))
            end
          end
          return allowed, b, retryAfterMs, resetMs
        end,

        -- charged: level, resetMs, the state to store, its time to live (ms)
        charge = function()
          local nextBalance = b - cost
          local nextUpdatedAtMs = math.max(nowMs, updatedAtMs)
          local resetMs = untilFullMs(nextBalance, nextUpdatedAtMs, s, nowMs)
          return nextBalance, resetMs, fmt(nextBalance) .. ' ' .. fmt(nextUpdatedAtMs) .. ' ' .. s.tag, resetMs
        end,
      }
    end,

    -- level, resetMs, the state to store, its time to live (ms); nil: dropped (an edit since)
    settle = function(s, delta, _admittedAtMs, stored, nowMs, _minTtlMs, refund)
      local balance, updatedAtMs, tag = parseState(stored)
      -- a state of other numbers, or of another algorithm: computed for an older version of the limit
      if stored and tag ~= s.tag then return nil end
      if refund then delta = -refund(-delta, s.periodMs) end -- bounded by refund.max per period
      if not balance then
        balance = s.capacity
        updatedAtMs = nowMs
      end
      local b = refilled(balance, updatedAtMs, s, nowMs)
      local nextBalance = math.min(b - delta, s.capacity)
      local nextUpdatedAtMs = math.max(nowMs, updatedAtMs)
      local resetMs = untilFullMs(nextBalance, nextUpdatedAtMs, s, nowMs)
      return nextBalance, resetMs, fmt(nextBalance) .. ' ' .. fmt(nextUpdatedAtMs) .. ' ' .. s.tag, resetMs
    end,
  }
end)()
