--[[
Sluice limiter, Redis Cluster only: gives back what an admitted script call charged, when a later
limit of the same request (a key in another hash slot, decided by a later call) denied it.

AN INTERIM OPERATION: the request-lifecycle work adds a "settle" operation to acquire.lua (a cost
difference settled on the acquire's own clock); once it is in, the store gives back with it
(delta = -cost) and this file goes away.

Loaded as acquire.lua's helpers (everything above its "-- @algorithms" line) + every algorithm
snippet + this file (give-back-script.ts), so it reads and writes states with the algorithms' own
arithmetic: `evaluate(...).hold()` gives a state's level and its time until full/empty.

KEYS[k]   the state key of check k, all in one hash slot (one group of a request's checks)
ARGV[1]   nowMs      TESTS ONLY, as in acquire.lua (empty: Redis TIME)
ARGV[2]   minTtlMs   TESTS ONLY, as in acquire.lua (empty: none)
ARGV[3]   n          the number of keys; must equal #KEYS
ARGV[4..] per key k, in order: algorithm name, cost (what the acquire charged, > 0), the algorithm's
          `arity` numbers, then sinceMs: an upper bound, measured by the gateway, on how long ago the
          charge was made (ms >= 0).

token-bucket: the balance refilled to now, plus cost, capped at capacity: exactly the balance the
  bucket would have had without the charge (refill is linear until the cap).
sliding-window: the cost is taken off the window it was counted in, never below 0. That window is
  certain when now and now - sinceMs fall in the same window; otherwise (the charge was made just
  before a boundary, or just after) it is taken off the previous window, which lowers the estimate by
  at most what was charged, never more: a give-back never admits more than not charging would have.
An absent state (expired: already full or empty) is left absent.

Returns 2 values per key: level ('%.17g': balance or estimate after the give-back) and resetMs
(whole ms until the whole quota is back with no further traffic).
]]

local function fail(message) return redis.error_reply('ERR sluice give-back: ' .. message) end

local nowMs
if ARGV[1] and ARGV[1] ~= '' then
  nowMs = tonumber(ARGV[1])
  if not (nowMs and nowMs > -math.huge and nowMs < math.huge) then return fail('bad nowMs') end
else
  local t = redis.call('TIME')
  nowMs = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
end
local minTtlMs = 0
if ARGV[2] and ARGV[2] ~= '' then minTtlMs = tonumber(ARGV[2]) or 0 end

local n = tonumber(ARGV[3])
if not (n and n == #KEYS) then return fail('the number of give-backs must equal the number of keys') end

local function store(key, value, ttlMs)
  if ttlMs == 0 then
    redis.call('DEL', key)
  elseif ttlMs >= MAX_WAIT_MS then
    redis.call('SET', key, value)
  else
    redis.call('SET', key, value, 'PX', string.format('%.0f', math.ceil(math.max(ttlMs, minTtlMs))))
  end
end

-- the two numbers / three numbers of a state string, or nil
local function numbers(stored)
  if not stored then return nil end
  local out = {}
  for field in string.gmatch(stored, '%S+') do
    local x = tonumber(field)
    if not x then return nil end
    out[#out + 1] = x
  end
  return out
end

local GIVE_BACK = {
  ['token-bucket'] = function(algorithm, s, cost, stored)
    local state = numbers(stored)
    if not state or #state ~= 2 then return nil end
    local _, b = algorithm.evaluate(s, cost, stored, nowMs).hold() -- refilled to now
    return fmt(math.min(b + cost, s.capacity)) .. ' ' .. fmt(math.max(nowMs, state[2]))
  end,

  ['sliding-window'] = function(_, s, cost, stored, sinceMs)
    local state = numbers(stored)
    if not state or #state ~= 3 then return nil end
    local storedIndex, current, previous = state[1], state[2], state[3]
    local windowIndex = math.floor(nowMs / s.windowMs)
    if windowIndex <= storedIndex then
      windowIndex = storedIndex -- the clock is behind the stored window, or in it
    elseif windowIndex == storedIndex + 1 then
      previous = current
      current = 0
    else
      return nil -- nothing counted any more: nothing to give back
    end
    local chargedAtLatest = math.floor(nowMs / s.windowMs)
    local chargedAtEarliest = math.floor((nowMs - sinceMs) / s.windowMs)
    if chargedAtEarliest == chargedAtLatest and chargedAtLatest == windowIndex then
      current = math.max(0, current - cost)
    elseif chargedAtEarliest >= windowIndex - 1 then
      previous = math.max(0, previous - cost)
    end
    return fmt(windowIndex) .. ' ' .. fmt(current) .. ' ' .. fmt(previous)
  end,
}

local reply = {}
local i = 4
for k = 1, n do
  local name = ARGV[i]
  local algorithm = ALGORITHMS[name]
  local giveBack = GIVE_BACK[name]
  if not (algorithm and giveBack) then return fail('unknown algorithm ' .. tostring(name)) end
  local cost = tonumber(ARGV[i + 1])
  if not (cost and cost > 0 and cost < math.huge) then return fail('bad cost of key ' .. k) end
  local s = algorithm.spec(ARGV, i + 2)
  if not s then return fail('bad limits of key ' .. k) end
  i = i + 2 + algorithm.arity
  local sinceMs = tonumber(ARGV[i])
  if not (sinceMs and sinceMs >= 0 and sinceMs < math.huge) then return fail('bad sinceMs of key ' .. k) end
  i = i + 1
  local stored = redis.call('GET', KEYS[k])
  local nextState = giveBack(algorithm, s, cost, stored, sinceMs)
  if nextState then stored = nextState end
  -- the level and the time until the quota is whole again, by the algorithm's own arithmetic
  local _, level, _, resetMs = algorithm.evaluate(s, cost, stored, nowMs).hold()
  if nextState then store(KEYS[k], nextState, resetMs) end
  reply[#reply + 1] = fmt(level)
  reply[#reply + 1] = resetMs
end
if i ~= #ARGV + 1 then return fail('unexpected arguments after the last key') end
return reply
