--[[
Sliding window ("algorithm": "sliding-window"): the twin of model.ts. Same IEEE-754 double
operations in the same order, so Redis and the in-process store give bit-identical answers. Change
one, change the other (the differential test compares them).

A snippet of acquire.lua (spliced in where it says so when the script is loaded): it registers the
algorithm's factory in ALGORITHMS and uses the script's helpers (waitMs, fmt); its functions follow
acquire.lua's contract ("An algorithm").

ARGV of one check, after the algorithm name and the cost (arity 3):
  max        most cost the estimate may reach; > 0
  windowMs   window length in milliseconds; > 0
  tag        "W<max>/<windowMs>" (state-tag.ts): the numbers the state is written under

estimate = current + previous * (1 - elapsed / windowMs), windows aligned to whole multiples of
windowMs since the epoch; admitted iff estimate + cost <= max.

settle (ARGV after the 3 values: delta, admittedAtMs, refundMax): delta > 0 is counted on top in the window
of now; delta < 0 is given back to the window of admittedAtMs (never below 0) while it still counts.
A state written under another tag (the limit was edited since the admission) is left alone: the
settlement is dropped. A refund gives back at most what refund.max leaves per window (grantRefund).

State: the string "<windowIndex> <current> <previous> <tag>", the numbers '%.17g'. It matters until
the estimate is 0 (at most two windows), so that is its time to live. Absent, or unreadable (another
algorithm's state, or one written before tags) = nothing counted. Written under another tag (an edit):
a new max keeps the counts; a window of another length carries the old window's estimate now into the
new window as its current (its index means nothing in the new length).
]]
ALGORITHMS['sliding-window'] = function()
  -- specs read so far (see MAX_SPECS_KEPT), by tag (see the token bucket's)
  local specs, specsKept = {}, 0
  local floor = math.floor

  -- A state is three numbers (si, sc, sp: its window's index, that window's count and the one before),
  -- si nil for none: plain values, no table per check (issue 16).

  -- the counts in force at atMs: windowIndex, current, previous, elapsedMs
  local function countsAt(si, sc, sp, windowMs, atMs)
    local windowIndex = floor(atMs / windowMs)
    local elapsedMs = atMs - windowIndex * windowMs
    if not si then return windowIndex, 0, 0, elapsedMs end
    if windowIndex < si then
      windowIndex = si -- the clock is behind the stored window: its start
      elapsedMs = 0
    end
    if windowIndex == si then return windowIndex, sc, sp, elapsedMs end
    if windowIndex == si + 1 then return windowIndex, 0, sc, elapsedMs end
    return windowIndex, 0, 0, elapsedMs
  end

  local function estimateOf(current, previous, elapsedMs, windowMs)
    if not (elapsedMs > 0) then elapsedMs = 0 end
    local weight = 1 - elapsedMs / windowMs
    if not (weight > 0) then weight = 0 end
    return current + previous * weight
  end

  local function estimateAt(si, sc, sp, windowMs, atMs)
    local _, current, previous, elapsedMs = countsAt(si, sc, sp, windowMs, atMs)
    return estimateOf(current, previous, elapsedMs, windowMs)
  end

  -- real-number guess of the wait until estimate <= target (only where the search starts)
  local function guessMs(current, previous, elapsedMs, windowMs, target)
    if current <= target then
      return windowMs * (1 - (target - current) / previous) - elapsedMs
    end
    return windowMs - elapsedMs + windowMs * (1 - target / current)
  end

  -- waitMs(at, guess) with at(x) = estimateAt(..., nowMs + x) <= 0; the guess's ceiling, checked with
  -- at(x) and at(x - 1), is nearly always the answer (see the token bucket's untilFullMs)
  local function untilEmptyMs(si, sc, sp, windowMs, nowMs)
    local _, current, previous, elapsedMs = countsAt(si, sc, sp, windowMs, nowMs)
    if estimateOf(current, previous, elapsedMs, windowMs) <= 0 then return 0 end
    local guess = guessMs(current, previous, elapsedMs, windowMs, 0)
    if guess < MAX_WAIT_MS - 1 then
      local x = math.ceil(guess)
      if not (x >= 1) then x = 1 end
      if estimateAt(si, sc, sp, windowMs, nowMs + x) <= 0
          and (x == 1 or not (estimateAt(si, sc, sp, windowMs, nowMs + (x - 1)) <= 0)) then
        return x
      end
    end
    return waitMs(function(x) return estimateAt(si, sc, sp, windowMs, nowMs + x) <= 0 end, guess)
  end

  -- the last state this call wrote or read, as text and as numbers (as the token bucket's: a batch's
  -- requests mostly read what the one before wrote)
  local lastState, lastSi, lastSc, lastSp, lastTag

  -- si, sc, sp, tag; nil for nothing, another algorithm's or an untagged state
  local function parseState(stored)
    if stored == lastState then return lastSi, lastSc, lastSp, lastTag end
    local a = string.find(stored, ' ', 1, true)
    if not a then return nil end
    local c = string.find(stored, ' ', a + 1, true)
    if not c then return nil end
    local d = string.find(stored, ' ', c + 1, true)
    if not d or string.byte(stored, d + 1) ~= 87 then return nil end -- not 'W': another algorithm's
    local si = tonumber(string.sub(stored, 1, a - 1))
    local sc = tonumber(string.sub(stored, a + 1, c - 1))
    local sp = tonumber(string.sub(stored, c + 1, d - 1))
    if si and sc and sp then
      lastState, lastSi, lastSc, lastSp, lastTag = stored, si, sc, sp, string.sub(stored, d + 1)
      return si, sc, sp, lastTag
    end
    return nil
  end

  -- the state a decision starts from, given one written under another tag: written under a window of
  -- another length (an edit), that window's estimate now, carried into the new window as its current
  -- (model.ts: currentState)
  local function retagged(si, sc, sp, tag, s, nowMs)
    local slash = string.find(tag, '/', 1, true)
    local writtenMs = slash and tonumber(string.sub(tag, slash + 1))
    if writtenMs == s.windowMs then return si, sc, sp end
    if not (writtenMs and writtenMs > 0 and writtenMs < math.huge) then return nil end
    local carried = estimateAt(si, sc, sp, writtenMs, nowMs)
    return floor(nowMs / s.windowMs), carried, 0
  end

  local function encode(windowIndex, current, previous, tag)
    local state = fmt(windowIndex) .. ' ' .. fmt(current) .. ' ' .. fmt(previous) .. ' ' .. tag
    -- read back as it was written: '%.17g' and '%d' round-trip exactly
    lastState, lastSi, lastSc, lastSp, lastTag = state, windowIndex, current, previous, tag
    return state
  end

  -- allowed, then the evaluation for hold or charge: the state decided on (si, sc, sp; an edit's
  -- carried into the new window)
  local function evaluate(s, cost, stored, nowMs)
    local si, sc, sp, tag
    if stored then si, sc, sp, tag = parseState(stored) end
    if si and tag ~= s.tag then si, sc, sp = retagged(si, sc, sp, tag, s, nowMs) end
    local _, current, previous, elapsedMs = countsAt(si, sc, sp, s.windowMs, nowMs)
    return estimateOf(current, previous, elapsedMs, s.windowMs) + cost <= s.max, si, sc, sp
  end

  -- "again" (acquire.lua's againRequest): of k requests in a row at nowMs, how many this limit alone
  -- admits (the first ones), and the state to store after charging them, with its time to live: the
  -- same operations in the same order as evaluate then charge, k times, one state formatted at the end
  local function again(s, cost, stored, nowMs, k)
    local allowed, si, sc, sp = evaluate(s, cost, stored, nowMs)
    if not allowed then return 0 end
    local windowMs, max = s.windowMs, s.max
    -- the first one charged (written, and read back exactly): the state moves into the window of nowMs
    local windowIndex, current, previous, elapsedMs = countsAt(si, sc, sp, windowMs, nowMs)
    si, sc, sp = windowIndex, current + cost, previous
    -- From here on countsAt at nowMs gives back (si, sc, sp) and this elapsedMs: the window, its
    -- previous count and the weight stay as they are for the whole run (one clock). So each next one
    -- is evaluated and charged as evaluate then charge would (estimateOf written out, the same
    -- operations in the same order), without a Lua call per request.
    if not (elapsedMs > 0) then elapsedMs = 0 end
    local weight = 1 - elapsedMs / windowMs
    if not (weight > 0) then weight = 0 end
    local admitted = 1
    while admitted < k and sc + sp * weight + cost <= max do
      admitted = admitted + 1
      sc = sc + cost
    end
    local resetMs = untilEmptyMs(si, sc, sp, windowMs, nowMs)
    return admitted, encode(si, sc, sp, s.tag), resetMs
  end

  return {
    arity = 3,

    spec = function(argv, i)
      -- one spec per tag, as the token bucket's
      local known = specs[argv[i + 2]]
      if known and known.texts[1] == argv[i] and known.texts[2] == argv[i + 1] then return known end
      local s = {
        max = tonumber(argv[i]), windowMs = tonumber(argv[i + 1]), tag = argv[i + 2],
        texts = { argv[i], argv[i + 1] },
      }
      if s.max and s.max > 0 and s.max < math.huge
          and s.windowMs and s.windowMs > 0 and s.windowMs < math.huge
          and s.tag and string.byte(s.tag, 1) == 87 and string.find(s.tag, '/', 1, true) then
        if specsKept >= MAX_SPECS_KEPT then specs, specsKept = {}, 0 end
        specs[s.tag], specsKept = s, specsKept + 1
        return s
      end
      return nil
    end,

    evaluate = evaluate,
    again = again,

    -- nothing charged: allowed, level, retryAfterMs, resetMs
    hold = function(s, cost, nowMs, allowed, si, sc, sp)
      local windowMs = s.windowMs
      local _, current, previous, elapsedMs = countsAt(si, sc, sp, windowMs, nowMs)
      local estimate = estimateOf(current, previous, elapsedMs, windowMs)
      local resetMs = untilEmptyMs(si, sc, sp, windowMs, nowMs)
      local retryAfterMs = 0
      if not allowed then
        retryAfterMs = resetMs -- never admissible: cost > max
        if cost <= s.max then
          retryAfterMs = waitMs(
            function(x) return estimateAt(si, sc, sp, windowMs, nowMs + x) + cost <= s.max end,
            guessMs(current, previous, elapsedMs, windowMs, s.max - cost))
        end
      end
      return allowed, estimate, retryAfterMs, resetMs
    end,

    -- charged: level, resetMs, the state to store, its time to live (ms)
    charge = function(s, cost, nowMs, _minTtlMs, si, sc, sp)
      local windowMs = s.windowMs
      local windowIndex, current, previous = countsAt(si, sc, sp, windowMs, nowMs)
      current = current + cost
      local level = estimateAt(windowIndex, current, previous, windowMs, nowMs)
      local resetMs = untilEmptyMs(windowIndex, current, previous, windowMs, nowMs)
      return level, resetMs, encode(windowIndex, current, previous, s.tag), resetMs
    end,

    -- level, resetMs, the state to store, its time to live (ms); nil: dropped (an edit since)
    settle = function(s, delta, admittedAtMs, stored, nowMs, _minTtlMs, refund)
      local windowMs = s.windowMs
      local si, sc, sp, tag
      if stored then si, sc, sp, tag = parseState(stored) end
      -- a state of other numbers, or of another algorithm: computed for an older version of the limit
      if stored and not (si and tag == s.tag) then return nil end
      if refund then delta = -refund(-delta, windowMs) end -- bounded by refund.max per window
      local windowIndex, current, previous = countsAt(si, sc, sp, windowMs, nowMs)
      if delta > 0 then
        current = current + delta
      elseif delta < 0 then
        local admittedIndex = floor(admittedAtMs / windowMs)
        if admittedIndex == windowIndex then
          current = math.max(0, current + delta)
        elseif admittedIndex == windowIndex - 1 then
          previous = math.max(0, previous + delta)
        end
      end
      local resetMs = untilEmptyMs(windowIndex, current, previous, windowMs, nowMs)
      return estimateAt(windowIndex, current, previous, windowMs, nowMs), resetMs,
        encode(windowIndex, current, previous, s.tag), resetMs
    end,
  }
end
