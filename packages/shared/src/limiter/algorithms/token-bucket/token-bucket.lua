--[[
Token bucket (rule format v1, and "algorithm": "token-bucket"): the twin of model.ts. Same
IEEE-754 double operations in the same order, so Redis and the in-process store give bit-identical
answers. Change one, change the other (the differential test compares them).

A snippet of acquire.lua (spliced in where it says so when the script is loaded): it registers the
algorithm's factory in ALGORITHMS and uses the script's helpers (waitMs, fmt). The functions it
returns follow acquire.lua's contract ("An algorithm"): an evaluation is plain values, no table or
closure per check (issue 16: those were most of a decision's cost in Redis).

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
ALGORITHMS['token-bucket'] = function()
  -- specs read so far (see MAX_SPECS_KEPT), by tag
  local specs, specsKept = {}, 0
  local min, max = math.min, math.max

  -- docs/limits.md: admitted iff b >= min(c, 1) and b - c >= -maxDebt
  local function admits(b, cost, maxDebt)
    return b >= min(cost, 1) and b - cost >= -maxDebt
  end

  -- elapsed * refill / periodMs, never elapsed * (refill / periodMs): see model.ts
  local function refilled(balance, updatedAtMs, s, atMs)
    local elapsedMs = atMs - updatedAtMs
    if not (elapsedMs > 0) then elapsedMs = 0 end -- a clock going backwards refills nothing
    return min(balance + elapsedMs * s.refill / s.periodMs, s.capacity)
  end

  -- waitMs(at, guess) with at(x) = refilled(..., nowMs + x) >= capacity. The guess's ceiling is
  -- nearly always the answer: checked here with at(x) and at(x - 1) (the smallest whole x with at(x)
  -- is the answer, however it is found), without the search's closure; the search otherwise.
  -- refilled(...) >= capacity is written out as balance + elapsedMs * refill / periodMs >= capacity
  -- (the same test: min(v, capacity) >= capacity iff v >= capacity), a Lua call being dear here.
  local function untilFullMs(balance, updatedAtMs, s, nowMs)
    local capacity, refill, periodMs = s.capacity, s.refill, s.periodMs
    local elapsedMs = nowMs - updatedAtMs
    if not (elapsedMs > 0) then elapsedMs = 0 end
    local b = balance + elapsedMs * refill / periodMs
    if b >= capacity then return 0 end
    local guess = (capacity - b) / (refill / periodMs)
    if guess < MAX_WAIT_MS - 1 then
      local x = math.ceil(guess)
      if not (x >= 1) then x = 1 end
      elapsedMs = (nowMs + x) - updatedAtMs
      if not (elapsedMs > 0) then elapsedMs = 0 end
      if balance + elapsedMs * refill / periodMs >= capacity then
        if x == 1 then return x end
        elapsedMs = (nowMs + (x - 1)) - updatedAtMs
        if not (elapsedMs > 0) then elapsedMs = 0 end
        if not (balance + elapsedMs * refill / periodMs >= capacity) then return x end
      end
    end
    return waitMs(function(x) return refilled(balance, updatedAtMs, s, nowMs + x) >= capacity end, guess)
  end

  -- the last state this call wrote or read, as text and as numbers: a batch's requests mostly decide
  -- on the state the one before wrote (a "batch-repeats" batch hands back that very string from its
  -- pending states, and Lua strings are interned: one pointer comparison), so it is not parsed again
  local lastState, lastBalance, lastUpdatedAtMs, lastTag

  -- balance, updatedAtMs, tag ('' written before tags); nil for nothing or another algorithm's state
  local function parseState(stored)
    if not stored then return nil end
    if stored == lastState then return lastBalance, lastUpdatedAtMs, lastTag end
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
    if balance and updatedAtMs then
      lastState, lastBalance, lastUpdatedAtMs, lastTag = stored, balance, updatedAtMs, tag
      return balance, updatedAtMs, tag
    end
    return nil
  end

  -- the state after charging or settling to nextBalance: level, resetMs, the state to store, its time to live (ms)
  local function written(s, nextBalance, updatedAtMs, nowMs)
    local nextUpdatedAtMs = max(nowMs, updatedAtMs)
    local resetMs = untilFullMs(nextBalance, nextUpdatedAtMs, s, nowMs)
    local state = fmt(nextBalance) .. ' ' .. fmt(nextUpdatedAtMs) .. ' ' .. s.tag
    -- read back as it was written: '%.17g' and '%d' round-trip exactly
    lastState, lastBalance, lastUpdatedAtMs, lastTag = state, nextBalance, nextUpdatedAtMs, s.tag
    return nextBalance, resetMs, state, resetMs
  end

  -- allowed, then the evaluation for hold or charge: the balance and its time as read (an edit's
  -- excess debt forgiven), and b, that balance refilled to now
  -- (refilled and admits written out: this runs for every check)
  local function evaluate(s, cost, stored, nowMs)
    local balance, updatedAtMs, tag
    if stored then balance, updatedAtMs, tag = parseState(stored) end
    local b
    if not balance then
      balance = s.capacity
      updatedAtMs = nowMs
      b = balance -- refilled over no time: the capacity
    else
      if tag ~= s.tag and balance < -s.maxDebt then
        balance = -s.maxDebt -- edited: a debt beyond the new maxDebt is forgiven
      end
      local elapsedMs = nowMs - updatedAtMs
      if not (elapsedMs > 0) then elapsedMs = 0 end -- a clock going backwards refills nothing
      b = balance + elapsedMs * s.refill / s.periodMs
      if s.capacity < b then b = s.capacity end -- min(b, capacity), as math.min compares
    end
    local least = cost
    if 1 < least then least = 1 end -- min(cost, 1)
    return b >= least and b - cost >= -s.maxDebt, balance, updatedAtMs, b
  end

  -- "again" (acquire.lua's againRequest): of k requests in a row at nowMs, how many this limit alone
  -- admits (the first ones), and the state to store after charging them, with its time to live. The
  -- same operations in the same order as evaluate then charge, k times (a state written is read back
  -- exactly: '%.17g'), without the text of every state between: one is formatted, at the end.
  local function again(s, cost, stored, nowMs, k)
    local allowed, balance, updatedAtMs, b = evaluate(s, cost, stored, nowMs)
    local least = cost
    if 1 < least then least = 1 end -- min(cost, 1)
    local refill, periodMs, capacity, maxDebt = s.refill, s.periodMs, s.capacity, s.maxDebt
    local admitted = 0
    while allowed and admitted < k do
      admitted = admitted + 1
      -- charged: b - cost at max(nowMs, updatedAtMs) (written)
      balance = b - cost
      if updatedAtMs < nowMs then updatedAtMs = nowMs end
      -- evaluated again, under the limit's own tag now (evaluate written out)
      local elapsedMs = nowMs - updatedAtMs
      if not (elapsedMs > 0) then elapsedMs = 0 end
      b = balance + elapsedMs * refill / periodMs
      if capacity < b then b = capacity end
      allowed = b >= least and b - cost >= -maxDebt
    end
    if admitted == 0 then return 0 end
    local _, _, state, ttlMs = written(s, balance, updatedAtMs, nowMs)
    return admitted, state, ttlMs
  end

  return {
    arity = 5,

    spec = function(argv, i)
      -- the requests of a batch mostly share their limits: one spec per tag, its numbers read once
      -- (a hit compares the argument strings, which Lua interns: pointer comparisons)
      local known = specs[argv[i + 4]]
      if known and known.texts[1] == argv[i] and known.texts[2] == argv[i + 1]
          and known.texts[3] == argv[i + 2] and known.texts[4] == argv[i + 3] then
        return known
      end
      local s = {
        capacity = tonumber(argv[i]), refill = tonumber(argv[i + 1]),
        periodMs = tonumber(argv[i + 2]), maxDebt = argv[i + 3] == '0' and 0 or tonumber(argv[i + 3]), tag = argv[i + 4],
        texts = { argv[i], argv[i + 1], argv[i + 2], argv[i + 3] },
      }
      if s.capacity and s.capacity > 0 and s.capacity < math.huge
          and s.refill and s.refill > 0 and s.refill < math.huge
          and s.periodMs and s.periodMs > 0 and s.periodMs < math.huge
          and s.maxDebt and s.maxDebt >= 0 and s.maxDebt < math.huge
          and s.tag and string.byte(s.tag, 1) == 84 then
        if specsKept >= MAX_SPECS_KEPT then specs, specsKept = {}, 0 end
        specs[s.tag], specsKept = s, specsKept + 1
        return s
      end
      return nil
    end,

    evaluate = evaluate,
    again = again,

    -- nothing charged: allowed, level, retryAfterMs, resetMs
    hold = function(s, cost, nowMs, allowed, balance, updatedAtMs, b)
      local resetMs = untilFullMs(balance, updatedAtMs, s, nowMs)
      local retryAfterMs = 0
      if not allowed then
        retryAfterMs = resetMs -- never admissible: cost > capacity + maxDebt, or capacity < 1 <= cost
        if admits(s.capacity, cost, s.maxDebt) then
          local needed = max(min(cost, 1), cost - s.maxDebt)
          retryAfterMs = waitMs(
            function(x) return admits(refilled(balance, updatedAtMs, s, nowMs + x), cost, s.maxDebt) end,
            (needed - b) / (s.refill / s.periodMs))
        end
      end
      return allowed, b, retryAfterMs, resetMs
    end,

    -- charged: level, resetMs, the state to store, its time to live (ms)
    charge = function(s, cost, nowMs, _minTtlMs, _balance, updatedAtMs, b)
      return written(s, b - cost, updatedAtMs, nowMs)
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
      return written(s, min(b - delta, s.capacity), updatedAtMs, nowMs)
    end,
  }
end
