--[[
Sliding window ("algorithm": "sliding-window"): the twin of model.ts. Same IEEE-754 double
operations in the same order, so Redis and the in-process store give bit-identical answers. Change
one, change the other (the differential test compares them).

A snippet of acquire.lua (spliced in where it says so when the script is loaded): it registers the
algorithm in ALGORITHMS and uses the script's helpers (waitMs, fmt).

ARGV of one check, after the algorithm name and the cost (arity 2):
  max        most cost the estimate may reach; > 0
  windowMs   window length in milliseconds; > 0

estimate = current + previous * (1 - elapsed / windowMs), windows aligned to whole multiples of
windowMs since the epoch; admitted iff estimate + cost <= max.

settle (ARGV after the 2 numbers: delta, admittedAtMs): delta > 0 is counted on top in the window
of now; delta < 0 is given back to the window of admittedAtMs (never below 0) while it still counts.

State: the string "<windowIndex> <current> <previous>", '%.17g' each. It matters until the estimate
is 0 (at most two windows), so that is its time to live. Absent, or unreadable (another algorithm's
state) = nothing counted.
]]
ALGORITHMS['sliding-window'] = (function()
  -- the counts in force at atMs: windowIndex, current, previous, elapsedMs
  local function countsAt(st, windowMs, atMs)
    local windowIndex = math.floor(atMs / windowMs)
    local elapsedMs = atMs - windowIndex * windowMs
    if not st then return windowIndex, 0, 0, elapsedMs end
    if windowIndex < st.windowIndex then
      windowIndex = st.windowIndex -- the clock is behind the stored window: its start
      elapsedMs = 0
    end
    if windowIndex == st.windowIndex then return windowIndex, st.current, st.previous, elapsedMs end
    if windowIndex == st.windowIndex + 1 then return windowIndex, 0, st.current, elapsedMs end
    return windowIndex, 0, 0, elapsedMs
  end

  local function estimateOf(current, previous, elapsedMs, windowMs)
    if not (elapsedMs > 0) then elapsedMs = 0 end
    local weight = 1 - elapsedMs / windowMs
    if not (weight > 0) then weight = 0 end
    return current + previous * weight
  end

  local function estimateAt(st, windowMs, atMs)
    local _, current, previous, elapsedMs = countsAt(st, windowMs, atMs)
    return estimateOf(current, previous, elapsedMs, windowMs)
  end

  -- real-number guess of the wait until estimate <= target (only where the search starts)
  local function guessMs(current, previous, elapsedMs, windowMs, target)
    if current <= target then
      return windowMs * (1 - (target - current) / previous) - elapsedMs
    end
    return windowMs - elapsedMs + windowMs * (1 - target / current)
  end

  local function untilEmptyMs(st, windowMs, nowMs)
    local _, current, previous, elapsedMs = countsAt(st, windowMs, nowMs)
    return waitMs(
      function(x) return estimateAt(st, windowMs, nowMs + x) <= 0 end,
      guessMs(current, previous, elapsedMs, windowMs, 0))
  end

  local function parseState(stored)
    if not stored then return nil end
    local a, b = string.find(stored, ' ', 1, true)
    if not a then return nil end
    local c = string.find(stored, ' ', b + 1, true)
    if not c then return nil end
    local st = {
      windowIndex = tonumber(string.sub(stored, 1, a - 1)),
      current = tonumber(string.sub(stored, a + 1, c - 1)),
      previous = tonumber(string.sub(stored, c + 1)),
    }
    if st.windowIndex and st.current and st.previous then return st end
    return nil
  end

  return {
    arity = 2,

    spec = function(argv, i)
      local s = { max = tonumber(argv[i]), windowMs = tonumber(argv[i + 1]) }
      if s.max and s.max > 0 and s.max < math.huge
          and s.windowMs and s.windowMs > 0 and s.windowMs < math.huge then
        return s
      end
      return nil
    end,

    evaluate = function(s, cost, stored, nowMs)
      local st = parseState(stored)
      local windowMs = s.windowMs
      local windowIndex, current, previous, elapsedMs = countsAt(st, windowMs, nowMs)
      local estimate = estimateOf(current, previous, elapsedMs, windowMs)
      local allowed = estimate + cost <= s.max
      return {
        allowed = allowed,

        -- nothing charged: allowed, level, retryAfterMs, resetMs
        hold = function()
          local resetMs = untilEmptyMs(st, windowMs, nowMs)
          local retryAfterMs = 0
          if not allowed then
            retryAfterMs = resetMs -- never admissible: cost > max
            if cost <= s.max then
              retryAfterMs = waitMs(
                function(x) return estimateAt(st, windowMs, nowMs + x) + cost <= s.max end,
                guessMs(current, previous, elapsedMs, windowMs, s.max - cost))
            end
          end
          return allowed, estimate, retryAfterMs, resetMs
        end,

        -- charged: level, resetMs, the state to store, its time to live (ms)
        charge = function()
          local nxt = { windowIndex = windowIndex, current = current + cost, previous = previous }
          local level = estimateAt(nxt, windowMs, nowMs)
          local resetMs = untilEmptyMs(nxt, windowMs, nowMs)
          local value = fmt(nxt.windowIndex) .. ' ' .. fmt(nxt.current) .. ' ' .. fmt(nxt.previous)
          return level, resetMs, value, resetMs
        end,
      }
    end,

    -- level, resetMs, the state to store, its time to live (ms)
    settle = function(s, delta, admittedAtMs, stored, nowMs)
      local windowMs = s.windowMs
      local windowIndex, current, previous = countsAt(parseState(stored), windowMs, nowMs)
      if delta > 0 then
        current = current + delta
      elseif delta < 0 then
        local admittedIndex = math.floor(admittedAtMs / windowMs)
        if admittedIndex == windowIndex then
          current = math.max(0, current + delta)
        elseif admittedIndex == windowIndex - 1 then
          previous = math.max(0, previous + delta)
        end
      end
      local nxt = { windowIndex = windowIndex, current = current, previous = previous }
      local resetMs = untilEmptyMs(nxt, windowMs, nowMs)
      local value = fmt(nxt.windowIndex) .. ' ' .. fmt(nxt.current) .. ' ' .. fmt(nxt.previous)
      return estimateAt(nxt, windowMs, nowMs), resetMs, value, resetMs
    end,
  }
end)()
