--[[
Sluice token bucket (SPEC §2): the twin of bucket.ts. Same IEEE-754 double operations in the
same order, so Redis and the in-process store give bit-identical answers. Change one, change
the other (the Redis differential test compares them).

KEYS[1]  the bucket key, `<prefix>{<ruleId>:<clientKey>}` (hash tag: one slot in Redis Cluster)
ARGV[1]  capacity      most tokens the bucket holds; > 0
ARGV[2]  refill        tokens gained every period, continuously; > 0
ARGV[3]  periodMs      refill period in milliseconds; > 0
ARGV[4]  maxDebt       how far below zero an admitted request may take the balance; >= 0
ARGV[5]  cost          tokens this request takes; > 0
ARGV[6]  nowMs         TESTS ONLY. Empty or absent = the clock is Redis `TIME`. Production never
                       passes it: the bucket's time must be the store's clock, never a gateway's.
ARGV[7]  minTtlMs      TESTS ONLY. Empty or absent = none. A floor on the key's time to live, so a
                       test walking a simulated clock does not see keys expire in real time.
                       (Expiry only ever removes a full bucket, so keeping it longer changes nothing.)
Numbers arrive as decimal strings that round-trip exactly (JavaScript `String(x)`).

State: a string "<balance> <updatedAtMs>", both '%.17g' (exact round trip), written with SET PX
= the ms until the bucket is full again, so a bucket that would sit full expires and idle clients
cost nothing. A denied request writes nothing. An admitted request that leaves the bucket full
(a cost below the balance's precision) deletes it. A bucket full only in MAX_WAIT_MS or more
(~31,700 years: a pathologically slow refill) is kept without expiry rather than expire early.

Returns { allowed (1|0), balance (string, '%.17g'), retryAfterMs (integer), fullInMs (integer) }.
Lua numbers returned to Redis are truncated to integers, hence the balance as a string; the two
waits are whole ms no larger than 1e15, which integers carry exactly.

Needs Redis >= 5: TIME followed by a write is allowed because scripts replicate their effects
(the default since 5, the only mode since 7), so no redis.replicate_commands() call.
]]

local MAX_WAIT_MS = 1e15

local capacity = tonumber(ARGV[1])
local refill = tonumber(ARGV[2])
local periodMs = tonumber(ARGV[3])
local maxDebt = tonumber(ARGV[4])
local cost = tonumber(ARGV[5])
if not (capacity and capacity > 0 and capacity < math.huge
    and refill and refill > 0 and refill < math.huge
    and periodMs and periodMs > 0 and periodMs < math.huge
    and maxDebt and maxDebt >= 0 and maxDebt < math.huge
    and cost and cost > 0 and cost < math.huge) then
  return redis.error_reply('ERR sluice token bucket: bad limits or cost')
end

local nowMs
if ARGV[6] and ARGV[6] ~= '' then
  nowMs = tonumber(ARGV[6])
  if not (nowMs and nowMs > -math.huge and nowMs < math.huge) then
    return redis.error_reply('ERR sluice token bucket: bad nowMs')
  end
else
  local t = redis.call('TIME') -- { seconds, microseconds }
  nowMs = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
end
local minTtlMs = 0
if ARGV[7] and ARGV[7] ~= '' then minTtlMs = tonumber(ARGV[7]) or 0 end

local rate = refill / periodMs -- tokens per ms

-- SPEC §2: admitted iff b >= min(c, 1) and b - c >= -maxDebt
local function admits(b)
  return b >= math.min(cost, 1) and b - cost >= -maxDebt
end

local function refilled(balance, updatedAtMs, atMs)
  local elapsedMs = atMs - updatedAtMs
  if not (elapsedMs > 0) then elapsedMs = 0 end -- a clock going backwards refills nothing
  return math.min(balance + elapsedMs * rate, capacity)
end

-- Smallest whole x (ms) with holds(refilled(.., nowMs + x)), capped at MAX_WAIT_MS;
-- bracket from the estimate, then bisect (holds is monotone in time). Mirrors waitMs in bucket.ts.
local function waitMs(balance, updatedAtMs, targetBalance, holds)
  local function at(x) return holds(refilled(balance, updatedAtMs, nowMs + x)) end
  if at(0) then return 0 end
  local estimateMs = (targetBalance - refilled(balance, updatedAtMs, nowMs)) / rate
  local x
  if estimateMs < MAX_WAIT_MS then x = math.ceil(estimateMs) else x = MAX_WAIT_MS end
  if not (x >= 1) then x = 1 end
  local lo, hi
  local step = 1
  if at(x) then
    hi = x
    lo = 0
    while hi - step > 0 do
      local candidate = hi - step
      if not at(candidate) then
        lo = candidate
        break
      end
      hi = candidate
      step = step * 2
    end
  else
    lo = x
    while true do
      local candidate = lo + step
      if candidate >= MAX_WAIT_MS then
        if not at(MAX_WAIT_MS) then return MAX_WAIT_MS end
        hi = MAX_WAIT_MS
        break
      end
      if at(candidate) then
        hi = candidate
        break
      end
      lo = candidate
      step = step * 2
    end
  end
  while hi - lo > 1 do
    local mid = math.floor((lo + hi) / 2)
    if at(mid) then hi = mid else lo = mid end
  end
  return hi
end

local function isFull(b) return b >= capacity end

local function fmt(x) return string.format('%.17g', x) end

-- Current state; absent (expired = was full) or unreadable = a new, full bucket.
local balance, updatedAtMs
local stored = redis.call('GET', KEYS[1])
if stored then
  local sep = string.find(stored, ' ', 1, true)
  if sep then
    balance = tonumber(string.sub(stored, 1, sep - 1))
    updatedAtMs = tonumber(string.sub(stored, sep + 1))
  end
end
if not (balance and updatedAtMs) then
  balance = capacity
  updatedAtMs = nowMs
end

local b = refilled(balance, updatedAtMs, nowMs)

if admits(b) then
  local nextBalance = b - cost
  local nextUpdatedAtMs = math.max(nowMs, updatedAtMs)
  local fullInMs = waitMs(nextBalance, nextUpdatedAtMs, capacity, isFull)
  local value = fmt(nextBalance) .. ' ' .. fmt(nextUpdatedAtMs)
  if fullInMs == 0 then
    redis.call('DEL', KEYS[1])
  elseif fullInMs >= MAX_WAIT_MS then
    redis.call('SET', KEYS[1], value) -- full in "at least MAX_WAIT_MS": never expire it early
  else
    local ttlMs = math.max(fullInMs, minTtlMs)
    redis.call('SET', KEYS[1], value, 'PX', string.format('%.0f', math.ceil(ttlMs)))
  end
  return { 1, fmt(nextBalance), 0, fullInMs }
end

local fullInMs = waitMs(balance, updatedAtMs, capacity, isFull)
local retryAfterMs = fullInMs -- never admissible (cost > capacity + maxDebt, or capacity < 1 <= cost)
if admits(capacity) then
  retryAfterMs = waitMs(balance, updatedAtMs, math.max(math.min(cost, 1), cost - maxDebt), admits)
end
return { 0, fmt(b), retryAfterMs, fullInMs }
