--[[
Sluice limiter: the one script every decision runs (one call per request, whatever its number of
limits: FCALL of the Redis Function library made of this text, or EVALSHA of it, see `run` at the
end). The algorithm snippets (algorithms/*/<name>.lua) are spliced in at the line "-- @algorithms"
when the text is assembled (acquire-script.ts); each registers itself in ALGORITHMS.
An overview of this wire format, batch form included: docs/redis-protocol.md.

KEYS[k]   the state key of check k (k = 1..n), built with limitKey(); all of one request's keys
          share a Redis Cluster hash tag
ARGV[1]   operation: "acquire" (admission), "settle" (the end of an exchange), "renew" (slots of a
          running exchange kept for another lease), or "batch" / "batch-repeats" (several requests
          of any of these kinds in one call, see below)
ARGV[2]   nowMs      TESTS ONLY. Empty = the clock is Redis `TIME`. Production never passes it: time
                     is the store's clock, never a gateway's.
ARGV[3]   minTtlMs   TESTS ONLY. Empty = none. A floor on every written key's time to live, so a test
                     walking a simulated clock does not see keys expire in real time. (Expiry only
                     removes state that no longer matters, so keeping it longer changes nothing.)
ARGV[4]   n          the number of checks; must equal #KEYS
ARGV[5..] "acquire", per check k, in order: algorithm name, cost (> 0), then the algorithm's `arity`
          values (documented at the top of its snippet).
          "settle", per settlement k, in order: algorithm name, its `arity` values, delta (the real
          cost minus the admitted one: > 0 charged on top, < 0 given back; 0 for concurrency),
          admittedAtMs (the acquire's clock, its last reply value), refundMax ('' unless the
          settlement is a refund: then the most refunds give back to this key per its period, see
          grantRefund)
          "renew", exactly as "settle"; only algorithms with a `renew` (concurrency) take it
          then, after the last check's (or settlement's) values, the request's ids: one per check of
          an algorithm that `takesId` (a concurrency slot's lease id, unique per request), in check
          order. They stand apart from the limits' values so that requests on the same limits share
          those (a batch's '@<r>', below) and each sends only its ids.
Numbers arrive as decimal strings that round-trip exactly (JavaScript `String(x)`).

"acquire", all or nothing: Redis TIME is read once; every check is evaluated against its state; if
every one admits, every one is charged (its state written with a time to live of how long it
matters: SET PX, DEL when it no longer does, no expiry for waits of MAX_WAIT_MS or more), otherwise
nothing at all is written.

"settle": each settlement applied to its key in order (see each snippet's "settle"): one script call
gives back a request's slots and settles its cost difference. Replies one string, 2 values per
settlement separated by single spaces: level ('%.17g') and resetMs (whole ms); '0' and '-1' for a
settlement dropped because its key's state was written under another version of the limit (an edit
since the admission: state-tag.ts). "renew" is the same with each snippet's "renew" instead of its
"settle", and replies the same way.

"acquire" replies one string: 4 values per check, then the decision's clock ('%.17g' ms), separated
by single spaces, in order: allowed (1|0: this limit alone would admit), level ('%.17g': token
bucket balance, sliding window estimate, after the decision), retryAfterMs (whole ms, 0 when this
limit admits), resetMs (whole ms until the whole quota is back with no further traffic). One string
rather than an array: Redis converts a reply element by element, and that was a tenth of a decision's
cost (issue 16). The waits are whole ms no larger than 1e15, written with '%d'.

"batch" (RedisStore's batching: the requests bound for one node in one event-loop turn): ARGV[4] is
m, the number of requests; then, per request j in arrival order: its operation ("acquire" or
"settle"), n_j its number of keys, argc_j its number of arguments, then those argc_j arguments exactly
as ARGV[5..] of a single call (its ids last); or, instead of argc_j and the arguments, "@<r>": the
same limits' values as request r < j of this batch (requests on the same limits: sent once, read where
they are), then this request's own ids, as many as request r has (a request whose own arguments were
bad has no count: a reference to it fails the whole call); or, for
the whole header, "again" and k: k more acquires exactly like the request before (its keys and
arguments, none of their own), replied to together (see againRequest); or after a give-back, k more
give-backs like it, each followed by its own ids (see settleAgain). KEYS are every request's
keys, request after request. Each request is
decided exactly as a call of its own would be, on the batch's one clock (the TIME read once, or
nowMs), one after the other in order: request j sees what requests 1..j-1 wrote. Returns m replies,
each the reply of its single call, or an error reply in its place when its own arguments are bad.
On a Redis Cluster every key of a batch is in one slot (RedisStore groups by slot).
"batch-repeats" is "batch" for a batch in which some key is used by more than one request: its states
are then kept pending and written once, at the end (see `pending`); the two decide alike.

Needs Redis >= 5 (>= 7 as a Function): TIME followed by writes is allowed because scripts replicate
their effects (the default since 5, the only mode since 7).
]]

--[[
An algorithm (algorithms/<name>/<name>.lua) registers a factory: ALGORITHMS['<name>'] = function()
... return { ... } end. The script builds an algorithm the first time a call names it (building every
one on every call cost more than a decision). What the factory returns:
  arity     how many ARGV values one check's limit takes, after its name and cost
  ownsKey   true: the algorithm reads and writes its key itself (its "stored" is the key); otherwise
            the script GETs the string state and SETs (or DELs) what charge/settle return
  takesId   true: each check of it carries an id of its request (the request's ids, see ARGV above),
            given to charge, settle and renew as their last argument (`id`)
  spec(argv, i)   the limit read from argv[i .. i + arity - 1]; nil when they are bad
  evaluate(spec, cost, stored, nowMs) -> allowed, x, y, z
            this limit alone would admit; x, y, z: what hold and charge need (plain values: no table
            or closure per check, issue 16)
  hold(spec, cost, nowMs, allowed, x, y, z) -> allowed, level, retryAfterMs, resetMs (nothing written)
  charge(spec, cost, nowMs, minTtlMs, x, y, z, id) -> level, resetMs, value, ttlMs (value nil: written itself)
  settle(spec, delta, admittedAtMs, stored, nowMs, minTtlMs, refund, id) -> level, resetMs, value, ttlMs
            (level nil: the settlement is dropped); renew, where slots can be renewed, the same
  again(spec, cost, stored, nowMs, k) -> admitted, value, ttlMs   (every algorithm but an ownsKey one)
            of k requests in a row, how many this limit alone admits (the first ones) and the state
            after charging them (value nil when none is): what evaluate then charge, k times, leave
  takeAgain(spec, key, nowMs, ids, k) -> true when k takes in a row of the slots ids[1..k] can be
            decided together (none of the ids in the set yet, none repeated), with room(spec, key,
            nowMs) -> held, free (live slots, and how many more it admits) and chargeAgain(spec, key,
            nowMs, minTtlMs, held, ids, admitted, k): the first `admitted` of the k taken, the rest
            denied (what evaluate then charge or hold, k times, leave; an algorithm holding slots)
  settleAgain(spec, admittedAtMs, key, nowMs, ids, k) -> level, resetMs   (an algorithm holding slots)
            k give-backs in a row of the slots ids[1..k] taken at admittedAtMs, in as few commands as it
            can: what settle, k times, leaves (and the reply each of them gets)
]]
local MAX_WAIT_MS = 1e15
-- The limits an algorithm read from the arguments, by their text, are kept (as a Function, from call
-- to call: a limit is read once, not once per call) up to this many; then it starts over
local MAX_SPECS_KEPT = 64
local ALGORITHMS = {}
--[[
Nothing at this level may reach Redis's Lua libraries (string, math, table, setmetatable...): a
Function library's code runs with only redis.register_function at hand while it loads. What needs them
is set up by `setUp`, at the first call; the functions below reach them only when they run.
]]
local format -- string.format: a local is cheaper to reach than a library's field, every time

-- The call's KEYS and ARGV, set by `run` (below) at the start of every call
local KEYS, ARGV
-- The call's clock: read once (TIME or ARGV[2]) by `run`, and its '%.17g' text with it.
local nowMs, nowText
-- TESTS ONLY (ARGV[3]): a floor on every written key's time to live; 0 = none
local minTtlMs = 0

-- '%.17g' (exact round trip). Formatting a double that way is the dearest thing a decision does in
-- Redis (issue 16: about a sixth of the script's CPU), and a decision formats the same few values
-- again and again: the clock (a state's update time, a lease's expiry base, the reply's last value)
-- and the level it just wrote into the state (the reply's level). Those come from memory. Zero is
-- written out: -0 equals 0 (a cache would mix them up) but is written "-0".
-- A whole number below 1e15 (a full bucket's balance after a cost of 1, a window's count) is written
-- with '%d', the same text at a third of the price.
-- Small whole numbers (a concurrency limit's slots held, a window's count) come from a table of their
-- texts, so that they do not take the one-entry memory from the value formatted before them (a
-- lease's expiry, the same for a whole call).
local lastFormatted, lastText
local SMALL_WHOLE = 4096
local smallWholeTexts = {}
local function fmt(x)
  if x == 0 then
    if 1 / x < 0 then return '-0' end
    return '0'
  end
  if x == nowMs then return nowText end
  if x == lastFormatted then return lastText end
  if x > 0 and x < SMALL_WHOLE and x % 1 == 0 then
    local text = smallWholeTexts[x]
    if not text then
      text = format('%d', x)
      smallWholeTexts[x] = text
    end
    return text
  end
  lastFormatted = x
  if x % 1 == 0 and x < 1e15 and x > -1e15 then
    lastText = format('%d', x)
  else
    lastText = format('%.17g', x)
  end
  return lastText
end

-- '%d' of a whole number of ms (a wait, a reset), the last one from memory: the requests of a batch on
-- one limit mostly wait the same (-0 and 0 both write "0")
local lastWhole, lastWholeText
local function whole(x)
  if x ~= lastWhole then lastWhole, lastWholeText = x, format('%d', x) end
  return lastWholeText
end

-- Smallest whole x (ms) with at(x) true, capped at MAX_WAIT_MS; at must be monotone (false, then
-- true). Brackets from the estimate, then bisects. Mirrors algorithms/wait.ts.
local function waitMs(at, estimateMs)
  if at(0) then return 0 end
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

--[[
A batch whose requests share keys ("batch-repeats": one hot client's bucket, a cap for everyone)
keeps the string states it writes pending, by key (false: deleted), and writes each to Redis once, at
its end: a GET and a SET were a third of a decision's work in Redis (issue 16). What the batch wrote
is read back from here. Nothing else runs while a script does, so every key ends as
request-by-request writes leave it. A single call, or a batch of different keys ("batch"), writes at
once: the tables would cost it more than they save (a table made on every call is dear in Redis).
Declared before the algorithms: an algorithm that owns its key (concurrency) keeps what it knows of
that key for the rest of such a call too.
]]
local pending, pendingTtls -- nil outside a "batch-repeats" call

--[[
What an algorithm keeps for one call only (a "batch-repeats" call's counts) is set up again at the
start of every call by the function it gives onCallStart, which also runs it at once, for the call
that built the algorithm. (As a Function, a factory runs once per library load, not once per call.)
]]
local callStarts = {}
local function onCallStart(start)
  callStarts[#callStarts + 1] = start
  start()
end

-- @algorithms

-- the algorithms calls use, each built from its factory the first time a call names it
local algorithms

local function setUp()
  format = string.format
  algorithms = setmetatable({}, {
    __index = function(built, name)
      local make = ALGORITHMS[name]
      if make == nil then return nil end
      local algorithm = make()
      built[name] = algorithm
      return algorithm
    end,
  })
end

local function fail(message) return redis.error_reply('ERR sluice limiter: ' .. message) end


-- writes a string state as charge/settle return it (ttlMs 0: it no longer matters, deleted)
local function write(key, value, ttlMs)
  if ttlMs == 0 then
    redis.call('DEL', key)
  elseif minTtlMs == 0 and ttlMs < 1e14 and ttlMs % 1 == 0 then
    -- a whole number of ms (every algorithm's usual time to live), as text: Redis would format a Lua
    -- number with '%.17g' (dear), and the reply's reset is mostly the same number, formatted once
    redis.call('SET', key, value, 'PX', whole(ttlMs))
  elseif ttlMs >= MAX_WAIT_MS then
    redis.call('SET', key, value) -- matters for "at least MAX_WAIT_MS": never expire it early
  else
    -- a whole number below MAX_WAIT_MS (or a test's floor): '%d' writes it exactly, cheaper than '%.0f'
    redis.call('SET', key, value, 'PX', format('%d', math.ceil(math.min(math.max(ttlMs, minTtlMs), MAX_WAIT_MS))))
  end
end

-- the state charge/settle returned for key, written or, in a batch, pending
local function store(key, value, ttlMs)
  if not pending then return write(key, value, ttlMs) end
  if ttlMs == 0 then value = false end
  pending[key], pendingTtls[key] = value, ttlMs
end

-- the state an algorithm decides on: its own key, or the string under it as this call left it
local function stateOf(algorithm, key)
  if algorithm.ownsKey then return key end
  local stored = pending and pending[key]
  if stored == nil then stored = redis.call('GET', key) end
  return stored
end

--[[
Refunds are bounded (SPEC §5, refund.max): what refunds give back to one key is counted under
"<key>|refunds" (same hash slot: the suffix is outside the hash tag; a limit name cannot hold '|') as a
level that drains at refundMax per periodMs (the limit's refill period or window). A refund of `amount`
gives back only what keeps that level within refundMax; past it, the request keeps its cost. The
string "<level> <updatedAtMs>" lives until the level has drained. Twin: algorithms/refund-ledger.ts.
Called by an algorithm's settle, only for a state it owns (a dropped settlement uses up nothing).
Returns what is given back.
]]
local function grantRefund(key, amount, refundMax, periodMs)
  local ledgerKey = key .. '|refunds'
  local level = 0
  local updatedAtMs = nowMs
  local stored = redis.call('GET', ledgerKey) -- never pending: only a refund reads or writes a ledger
  local sep = stored and string.find(stored, ' ', 1, true)
  if sep then
    local was = tonumber(string.sub(stored, 1, sep - 1))
    local at = tonumber(string.sub(stored, sep + 1))
    if was and at then
      local elapsedMs = nowMs - at
      if not (elapsedMs > 0) then elapsedMs = 0 end -- a clock going backwards drains nothing
      level = math.max(0, was - elapsedMs * refundMax / periodMs)
      updatedAtMs = math.max(nowMs, at)
    end
  end
  local granted = math.min(amount, refundMax - level)
  if not (granted > 0) then return 0 end
  level = level + granted
  write(ledgerKey, fmt(level) .. ' ' .. fmt(updatedAtMs), math.ceil(level * periodMs / refundMax))
  return granted
end

-- a settlement's admittedAtMs by its text, the last one: a batch's give-backs mostly carry the same
-- (the admissions of one earlier call)
local lastAdmittedText, lastAdmittedAtMs
-- settleRequest's replies of a request of several settlements (set 1..n before they are read)
local settleReplies = {}

-- A settlement's admittedAtMs from its text, the last one from memory (a batch's give-backs mostly
-- name the same few admission clocks); nil when it is not a number
local function admittedAtOf(text)
  if text ~= lastAdmittedText then lastAdmittedText, lastAdmittedAtMs = text, tonumber(text) end
  return lastAdmittedAtMs
end

-- Where the request just read ended its limits' values (the index after the last one): set by
-- acquireOne, acquireRequest and settleRequest once the values are read, for the batch loop to find
-- the request's ids (after them) and to count them for a later '@<r>'; nil when they were bad.
local argsEnd

-- The request's ids: ARGV[idAt ..] when the batch header says where (a '@<r>' request: its limits'
-- values are exactly ARGV[i .. last]), otherwise right after its values, filling ARGV up to last.
-- `e`: the index after its values, `ids`: how many its checks take. Returns where its ids start, or
-- nil when the arguments do not end where they should.
local function idsStart(e, last, idAt, ids)
  if idAt then
    if e ~= last + 1 then return nil end
    return idAt
  end
  if e + ids ~= last + 1 then return nil end
  return e
end

-- One request's settlements (or, `renewing`, renewals): KEYS[keyBase + 1 .. keyBase + n], their
-- arguments from ARGV[i] up to ARGV[last], their ids at idAt (see idsStart). Returns the reply, or an
-- error reply.
local function settleRequest(keyBase, n, i, last, renewing, idAt)
  local reply
  -- where the values end and how many ids follow, from the algorithms' names (the settlements are
  -- applied one by one as they are read, each with its id)
  local e, ids = i, 0
  for _ = 1, n do
    local algorithm = algorithms[ARGV[e]]
    if not algorithm then return fail('unknown algorithm ' .. tostring(ARGV[e])) end
    if algorithm.takesId then ids = ids + 1 end
    e = e + 4 + algorithm.arity
  end
  idAt = idsStart(e, last, idAt, ids)
  if not idAt then return fail('unexpected arguments after the last settlement') end
  argsEnd = e
  for k = 1, n do
    local algorithm = algorithms[ARGV[i]]
    if not algorithm then return fail('unknown algorithm ' .. tostring(ARGV[i])) end
    local step = algorithm.settle
    if renewing then step = algorithm.renew end
    if not step then return fail('algorithm ' .. ARGV[i] .. ' cannot renew') end
    local spec = algorithm.spec(ARGV, i + 1)
    if not spec then return fail('bad limits of settlement ' .. k) end
    i = i + 1 + algorithm.arity
    local delta = ARGV[i]
    if delta == '0' then delta = 0 else delta = tonumber(delta) end -- a give-back: no strtod
    local admittedAtMs = admittedAtOf(ARGV[i + 1])
    if not (delta and delta > -math.huge and delta < math.huge
        and admittedAtMs and admittedAtMs > -math.huge and admittedAtMs < math.huge) then
      return fail('bad delta or admittedAtMs of settlement ' .. k)
    end
    local refundMax = nil
    if ARGV[i + 2] ~= '' then
      refundMax = tonumber(ARGV[i + 2])
      if not (refundMax and refundMax > 0 and refundMax < math.huge) then
        return fail('bad refundMax of settlement ' .. k)
      end
    end
    i = i + 3
    local key = KEYS[keyBase + k]
    local refund = nil
    if refundMax and delta < 0 then
      refund = function(amount, periodMs) return grantRefund(key, amount, refundMax, periodMs) end
    end
    local stored = key -- an algorithm that owns its key reads it itself
    if not algorithm.ownsKey then stored = stateOf(algorithm, key) end
    local id = nil
    if algorithm.takesId then
      id = ARGV[idAt]
      idAt = idAt + 1
      if not id or id == '' then return fail('no id of settlement ' .. k) end
    end
    local level, resetMs, value, ttlMs = step(spec, delta, admittedAtMs, stored, nowMs, minTtlMs, refund, id)
    if level == nil then
      reply = '0 -1' -- dropped: the state was written under another version of the limit (state-tag.ts)
    else
      if value ~= nil then store(key, value, ttlMs) end -- nil: the algorithm wrote its own key
      reply = fmt(level) .. ' ' .. whole(resetMs)
    end
    settleReplies[k] = reply
  end
  if n == 1 then return reply end
  return table.concat(settleReplies, ' ', 1, n)
end

-- settleAgain's tables, reused from call to call (1..n or 1..k set before they are read)
local againAlgorithms, againSpecs, againAdmitted, againIds = {}, {}, {}, {}

--[[
"again" after a give-back (in a batch): k more give-backs exactly like the request before it (the
same keys and values: slots admitted by one call, given back in a row, as the gateway's responses end
in a burst), each sending only its ids (one per settlement) after the header, request after request:
ARGV[idAt ..]. They are applied as k give-backs in a row would be, in one command per key (a
concurrency key's ZREM of all k lease ids: issue 16, a give-back cost its own header, reply and
command), and reply one string, what each of the k would get alone (a give-back's reply does not
depend on its lease). Only plain give-backs (delta 0, no refund) of algorithms with a `settleAgain`;
everything is read and checked before anything is written.
]]
local function settleAgain(keyBase, n, i, last, k, idAt)
  for c = 1, n do
    local algorithm = algorithms[ARGV[i]]
    if not (algorithm and algorithm.settleAgain) then
      return fail('"again" of a settlement whose algorithm cannot repeat it')
    end
    local spec = algorithm.spec(ARGV, i + 1)
    if not spec then return fail('bad limits of settlement ' .. c) end
    i = i + 1 + algorithm.arity
    if ARGV[i] ~= '0' or ARGV[i + 2] ~= '' then return fail('"again" of a settlement that is not a give-back') end
    local admittedAtMs = admittedAtOf(ARGV[i + 1])
    if not (admittedAtMs and admittedAtMs > -math.huge and admittedAtMs < math.huge) then
      return fail('bad admittedAtMs of settlement ' .. c)
    end
    i = i + 3
    againAlgorithms[c], againSpecs[c], againAdmitted[c] = algorithm, spec, admittedAtMs
  end
  if i ~= last + 1 then return fail('unexpected arguments after the last settlement') end
  for at = idAt, idAt + k * n - 1 do
    local id = ARGV[at]
    if not id or id == '' then return fail('no id of a settlement of an "again"') end
  end
  local ids = againIds
  for c = 1, n do
    for r = 1, k do ids[r] = ARGV[idAt + (r - 1) * n + c - 1] end
    local level, resetMs = againAlgorithms[c].settleAgain(againSpecs[c], againAdmitted[c], KEYS[keyBase + c], nowMs, ids, k)
    settleReplies[c] = fmt(level) .. ' ' .. whole(resetMs)
  end
  if n == 1 then return settleReplies[1] end
  return table.concat(settleReplies, ' ', 1, n)
end

-- In a batch, requests on the same limits share their arguments ('@<r>': the same ARGV indexes): a
-- check's algorithm, cost and limit are read once per shared index, { algorithm, cost, spec } (made
-- at the batch's first reference back: a batch of different limits makes none)
local oneAt

-- Check k's algorithm, cost and limit, read from ARGV[i ..] (`shared`: an earlier request of this
-- batch has these arguments); nil and an error reply when they are bad.
local function readCheck(i, k, shared)
  local known = shared and oneAt and oneAt[i]
  if known then return known[1], known[2], known[3] end
  local algorithm = algorithms[ARGV[i]]
  if not algorithm then return nil, fail('unknown algorithm ' .. tostring(ARGV[i])) end
  local cost = ARGV[i + 1]
  if cost == '1' then cost = 1 else cost = tonumber(cost) end -- most costs: no strtod
  if not (cost and cost > 0 and cost < math.huge) then return nil, fail('bad cost of check ' .. k) end
  local spec = algorithm.spec(ARGV, i + 2)
  if not spec then return nil, fail('bad limits of check ' .. k) end
  if shared then
    if not oneAt then oneAt = {} end
    oneAt[i] = { algorithm, cost, spec }
  end
  return algorithm, cost, spec
end

-- A request of one check (most are): evaluated, then charged or held at once. `shared`: its
-- arguments are an earlier request's of this batch; its id (if its algorithm takes one) at idAt (see
-- idsStart).
local function acquireOne(key, i, last, shared, idAt)
  local algorithm, cost, spec = readCheck(i, 1, shared)
  if not algorithm then return cost end -- the error reply
  local e = i + 2 + algorithm.arity
  local id = nil
  if algorithm.takesId then
    idAt = idsStart(e, last, idAt, 1)
    if not idAt then return fail('unexpected arguments after the last check') end
    id = ARGV[idAt]
    if not id or id == '' then return fail('no id of check 1') end
  elseif e ~= last + 1 then
    return fail('unexpected arguments after the last check')
  end
  argsEnd = e
  -- stateOf and store written out: most decisions take this path, and a Lua call costs Redis about 500
  -- instructions (4 % of a hot decision for the two)
  local stored = key
  if not algorithm.ownsKey then
    stored = pending and pending[key]
    if stored == nil then stored = redis.call('GET', key) end
  end
  local allowed, x, y, z = algorithm.evaluate(spec, cost, stored, nowMs)
  if allowed then
    local level, resetMs, value, ttlMs = algorithm.charge(spec, cost, nowMs, minTtlMs, x, y, z, id)
    if value ~= nil then -- nil: the algorithm wrote its own key
      if not pending then
        write(key, value, ttlMs)
      else
        if ttlMs == 0 then value = false end
        pending[key], pendingTtls[key] = value, ttlMs
      end
    end
    return '1 ' .. fmt(level) .. ' 0 ' .. whole(resetMs) .. ' ' .. nowText
  end
  local _, level, retryAfterMs, resetMs = algorithm.hold(spec, cost, nowMs, false, x, y, z)
  return '0 ' .. fmt(level) .. ' ' .. whole(retryAfterMs) .. ' ' .. whole(resetMs) .. ' ' .. nowText
end

-- Each check's evaluation between the two passes of acquireRequest, by check, and its reply: made by
-- the first request of several checks, reused by the call's next ones (a request sets 1..n before it
-- reads them; a table made per request was a tenth of a stacked decision's work)
local evAlgorithm, evSpec, evCost, evAllowed, evX, evY, evZ, evReply

-- One request's checks, all or nothing: KEYS[keyBase + 1 .. keyBase + n], their arguments from
-- ARGV[i] up to ARGV[last]. Every check is evaluated before anything is written. Returns the reply,
-- or an error reply (then nothing was written).
local function acquireRequest(keyBase, n, i, last, shared, idAt)
  if n == 1 then return acquireOne(KEYS[keyBase + 1], i, last, shared, idAt) end
  if not evAlgorithm then
    evAlgorithm, evSpec, evCost, evAllowed, evX, evY, evZ, evReply = {}, {}, {}, {}, {}, {}, {}, {}
  end
  local allAllowed = true
  local ids = 0
  for k = 1, n do
    local algorithm, cost, spec = readCheck(i, k, shared)
    if not algorithm then return cost end -- the error reply
    i = i + 2 + algorithm.arity
    if algorithm.takesId then ids = ids + 1 end
    local allowed, x, y, z = algorithm.evaluate(spec, cost, stateOf(algorithm, KEYS[keyBase + k]), nowMs)
    evAlgorithm[k], evSpec[k], evCost[k], evAllowed[k], evX[k], evY[k], evZ[k] = algorithm, spec, cost, allowed, x, y, z
    if not allowed then allAllowed = false end
  end
  if ids == 0 and not idAt then
    -- no ids (most requests): the values end the request's arguments
    if i ~= last + 1 then return fail('unexpected arguments after the last check') end
  else
    idAt = idsStart(i, last, idAt, ids)
    if not idAt then return fail('unexpected arguments after the last check') end
    for k = idAt, idAt + ids - 1 do
      if ARGV[k] == '' then return fail('no id of check ' .. k - idAt + 1) end
    end
  end
  argsEnd = i

  local reply = evReply
  for k = 1, n do
    if allAllowed then
      local id = nil
      if ids > 0 and evAlgorithm[k].takesId then
        id = ARGV[idAt]
        idAt = idAt + 1
      end
      local level, resetMs, value, ttlMs = evAlgorithm[k].charge(evSpec[k], evCost[k], nowMs, minTtlMs, evX[k], evY[k], evZ[k], id)
      if value ~= nil then store(KEYS[keyBase + k], value, ttlMs) end -- nil: the algorithm wrote its own key
      reply[k] = '1 ' .. fmt(level) .. ' 0 ' .. whole(resetMs)
    else
      local allowed, level, retryAfterMs, resetMs = evAlgorithm[k].hold(evSpec[k], evCost[k], nowMs, evAllowed[k], evX[k], evY[k], evZ[k])
      reply[k] = (allowed and '1 ' or '0 ') .. fmt(level) .. ' ' .. whole(retryAfterMs) .. ' ' .. whole(resetMs)
    end
  end
  reply[n + 1] = nowText -- the decision's clock: a settlement gives back where it counted
  return table.concat(reply, ' ', 1, n + 1)
end

-- againRequest's reply, by line (made at its first use, reused: set 1..n+2 before it is read)
local againLines

-- check c's state as againRequest read it (its reply line: '' for none, never a state)
local function againStored(c)
  local stored = againLines[c + 2]
  if stored == '' then return false end
  return stored
end

-- The checks of the request an "again" repeats, read into evAlgorithm, evSpec and evCost (each from
-- its shared entry, or its algorithm's kept spec: no entry made here, an "again" is the last use of its
-- arguments in most batches); every algorithm must have `step`. Returns nil, or an error reply.
local function readAgainChecks(n, first, last, step, refusal)
  if not againLines then againLines = {} end
  if not evAlgorithm then
    evAlgorithm, evSpec, evCost, evAllowed, evX, evY, evZ, evReply = {}, {}, {}, {}, {}, {}, {}, {}
  end
  local i = first
  for c = 1, n do
    local algorithm, cost, spec = readCheck(i, c, oneAt and oneAt[i] and true)
    if not algorithm then return cost end -- the error reply
    if not algorithm[step] then return fail(refusal) end
    i = i + 2 + algorithm.arity
    evAlgorithm[c], evSpec[c], evCost[c] = algorithm, spec, cost
  end
  if i ~= last + 1 then return fail('unexpected arguments after the last check') end
  return nil
end

--[[
"again" (in a batch): k more acquires exactly like the request before it (the same keys and
arguments: a hot client's identical requests of one batch), decided one after the other right after
it. Replies one string, lines separated by '\n': how many of the k were admitted (always the first
ones: a denial writes nothing, so every later one is denied alike), the call's clock, then each key's
string state as the request before left it ('' for none). The gateway decides the k from those
states with the TypeScript twin of the algorithms (engine.ts, redis/reply.ts) and checks that it
admits as many. The k send no arguments and get no reply of their own: reading those and writing
them was most of what a hot decision cost Redis (issue 16). Only algorithms with a string state, each
by its own `again` (takes of slots have theirs: takeAgain, below).
]]
local function againRequest(keyBase, n, first, last, k)
  local bad = readAgainChecks(n, first, last, 'again', '"again" of a limit whose algorithm cannot repeat (it keeps its own key)')
  if bad then return bad end
  for c = 1, n do againLines[c + 2] = stateOf(evAlgorithm[c], KEYS[keyBase + c]) or '' end
  -- all or nothing: the first `admitted` requests pass every limit, where `admitted` is the fewest any
  -- limit alone admits (a limit's state changes only when a request is admitted, by all of them)
  local admitted = k
  for c = 1, n do
    local alone, value, ttlMs = evAlgorithm[c].again(evSpec[c], evCost[c], againStored(c), nowMs, k)
    evX[c], evY[c], evZ[c] = alone, value, ttlMs
    if alone < admitted then admitted = alone end
  end
  if admitted > 0 then
    for c = 1, n do
      local value, ttlMs = evY[c], evZ[c]
      if evX[c] > admitted then
        local _
        _, value, ttlMs = evAlgorithm[c].again(evSpec[c], evCost[c], againStored(c), nowMs, admitted)
      end
      store(KEYS[keyBase + c], value, ttlMs)
    end
  end
  againLines[1], againLines[2] = admitted, nowText
  return table.concat(againLines, '\n', 1, n + 2)
end


--[[
"again" after a take of slots (in a batch): k more acquires exactly like the request before it, every
check of which holds slots (concurrency), each sending only its ids (one per check) after the header,
request after request: ARGV[idAt ..]. Decided as k requests in a row: the first `admitted` pass (a
check alone admits as many as it has free slots; a denial writes nothing, so every later one is denied
alike), and each check's slots are added in one command (issue 16: a take cost its own header, reply
and ZADD). Replies one string, lines separated by '\n': admitted, the call's clock, then each check's
live slots before the k; the gateway tells each request its outcome from those (redis/reply.ts).
Where that would not be what k requests in a row do (one of the ids already in its set or repeated
among them, which a gateway never sends, or a lease that would expire as it is taken), or k is 1, each
request is decided on its own, and the reply is '=' and then their replies, a line each.
]]
local function takeAgain(keyBase, n, first, last, k, idAt)
  local bad = readAgainChecks(n, first, last, 'takeAgain', '"again" of a take whose algorithm cannot repeat it')
  if bad then return bad end
  for at = idAt, idAt + k * n - 1 do
    local id = ARGV[at]
    if not id or id == '' then return fail('no id of a check of an "again"') end
  end
  -- one alone costs no more decided on its own than its ZMSCORE would
  local together = k > 1
  for c = 1, together and n or 0 do
    local ids = againIds
    for r = 1, k do ids[r] = ARGV[idAt + (r - 1) * n + c - 1] end
    if not evAlgorithm[c].takeAgain(evSpec[c], KEYS[keyBase + c], nowMs, ids, k) then
      together = false
      break
    end
  end
  if not together then
    for r = 1, k do
      local reply = acquireRequest(keyBase, n, first, last, true, idAt + (r - 1) * n)
      if type(reply) ~= 'string' then return reply end -- an error reply
      againLines[r + 1] = reply
    end
    againLines[1] = '='
    return table.concat(againLines, '\n', 1, k + 1)
  end
  -- all or nothing: the first `admitted` pass every check (each check alone admits its free slots)
  local admitted = k
  for c = 1, n do
    local held, free = evAlgorithm[c].room(evSpec[c], KEYS[keyBase + c], nowMs)
    evY[c] = held
    if free < admitted then admitted = free end
  end
  for c = 1, n do
    local ids = againIds
    for r = 1, admitted do ids[r] = ARGV[idAt + (r - 1) * n + c - 1] end
    evAlgorithm[c].chargeAgain(evSpec[c], KEYS[keyBase + c], nowMs, minTtlMs, evY[c], ids, admitted, k)
    againLines[c + 2] = fmt(evY[c])
  end
  againLines[1], againLines[2] = fmt(admitted), nowText
  return table.concat(againLines, '\n', 1, n + 2)
end

--[[
One call: `keys` and `argv` are its KEYS and ARGV. As a Redis Function (Redis >= 7: acquire-script.ts
registers `run` in a library that each node loads once) everything above ran once, when the library
was loaded: only what follows runs per call, and the helpers above are not made again and again (as
a script they were, on every call: closures and garbage were a quarter of a lone call's work). As an
EVALSHA script (Redis 5 and 6) the whole text runs per call and ends in `run(KEYS, ARGV)`.
]]
-- A batch header's numbers by their text, kept across calls: the same few texts ('1', '7', '@1') head
-- request after request, call after call, and a table lookup costs a fraction of tonumber (false: not
-- a number; refs: '@<r>' read as r, false for none). Emptied past MAX_HEADER_TEXTS texts, so that odd
-- headers cannot grow them without bound.
local MAX_HEADER_TEXTS = 256
local numbers, refs, headerTexts = {}, {}, 0

local function run(keys, argv)
  KEYS, ARGV = keys, argv
  if not algorithms then setUp() end
  nowMs, nowText, minTtlMs, pending, pendingTtls, oneAt = nil, nil, 0, nil, nil, nil
  local operation = ARGV[1]
  local batching = operation == 'batch' or operation == 'batch-repeats'
  if operation ~= 'acquire' and operation ~= 'settle' and operation ~= 'renew' and not batching then
    return fail('unknown operation ' .. tostring(operation))
  end
  if operation == 'batch-repeats' then pending, pendingTtls = {}, {} end
  for c = 1, #callStarts do callStarts[c]() end

  if ARGV[2] and ARGV[2] ~= '' then
    nowMs = tonumber(ARGV[2])
    if not (nowMs and nowMs > -math.huge and nowMs < math.huge) then return fail('bad nowMs') end
  else
    local t = redis.call('TIME') -- { seconds, microseconds }
    -- written from TIME's own digits, "<seconds><ms>.<µs>", and read from that text: the text is exact
    -- by construction, at a fraction of the price of '%.17g' (issue 16)
    local us = t[2]
    if #us < 6 then us = string.rep('0', 6 - #us) .. us end
    nowText = t[1] .. string.sub(us, 1, 3) .. '.' .. string.sub(us, 4)
    nowMs = tonumber(nowText)
  end
  if not nowText then nowText = format('%.17g', nowMs) end
  if ARGV[3] and ARGV[3] ~= '' then minTtlMs = tonumber(ARGV[3]) or 0 end

  if not batching then
    local n = ARGV[4]
    if n == '1' then n = 1 else n = tonumber(n) end
    if not (n and n == #KEYS) then return fail('the number of checks must equal the number of keys') end
    if operation == 'settle' then return settleRequest(0, n, 5, #ARGV, false) end
    if operation == 'renew' then return settleRequest(0, n, 5, #ARGV, true) end
    return acquireRequest(0, n, 5, #ARGV)
  end

  -- "batch": m requests, each decided on its own, in order, exactly as m separate calls on this clock.
  -- The header of request j tells where its arguments end, so a request with bad arguments gets an
  -- error in its place and the next one is still found.
  local m = tonumber(ARGV[4])
  if not (m and m >= 1 and m == math.floor(m)) then return fail('bad number of requests') end
  -- made at their full length at once (a table grown one index at a time is rehashed at every power of
  -- two): m values copied from ARGV, every one overwritten below (within what unpack can put on Lua's
  -- stack; the gateway sends at most 64)
  local replies, firsts, lasts
  if m <= 1000 then
    replies, firsts, lasts = { unpack(ARGV, 1, m) }, { unpack(ARGV, 1, m) }, { unpack(ARGV, 1, m) }
  else
    replies, firsts, lasts = {}, {}, {}
  end
  -- by request, how many ids it sent, where it sent any (made at the first: most batches have none)
  local idCounts
  local keyCount, argCount = #KEYS, #ARGV
  if headerTexts >= MAX_HEADER_TEXTS then numbers, refs, headerTexts = {}, {}, 0 end
  local numbers, refs = numbers, refs
  local keyBase = 0
  local i = 5
  -- the request before, which an "again" repeats: its operation, keys, arguments and number of ids
  local lastOperation, lastKeyBase, lastN, lastFirst, lastLast, lastIds
  for j = 1, m do
    local requestOperation = ARGV[i]
    if requestOperation == 'again' then
      local kText = ARGV[i + 1]
      local k = kText and numbers[kText]
      if k == nil and kText then
        k = tonumber(kText) or false
        numbers[kText], headerTexts = k, headerTexts + 1
      end
      if not (k and k >= 1 and k == math.floor(k)
          and (lastOperation == 'acquire' or lastOperation == 'settle')) then
        return fail('bad header of request ' .. j)
      end
      if lastOperation == 'acquire' and lastIds == 0 then
        replies[j] = againRequest(lastKeyBase, lastN, lastFirst, lastLast, k)
        firsts[j], lasts[j] = lastFirst, lastLast
        i = i + 2
      else
        -- takes or give-backs of slots: each of the k sends its ids, one per check of the request before
        if not (lastIds == lastN and i + 1 + k * lastN <= argCount) then return fail('bad header of request ' .. j) end
        if lastOperation == 'acquire' then
          replies[j] = takeAgain(lastKeyBase, lastN, lastFirst, lastLast, k, i + 2)
        else
          replies[j] = settleAgain(lastKeyBase, lastN, lastFirst, lastLast, k, i + 2)
        end
        -- its ids are not those of one request: nothing may refer back to it
        firsts[j], lasts[j] = lastFirst, false
        i = i + 2 + k * lastN
      end
    else
      local nText, argcText = ARGV[i + 1], ARGV[i + 2]
      local n = nText and numbers[nText]
      if n == nil and nText then
        n = tonumber(nText) or false
        numbers[nText], headerTexts = n, headerTexts + 1
      end
      if not (n and argcText and n >= 0 and keyBase + n <= keyCount) then return fail('bad header of request ' .. j) end
      local r = refs[argcText]
      if r == nil then
        r = string.byte(argcText, 1) == 64 and (tonumber(string.sub(argcText, 2)) or 0) -- '@<r>'
        refs[argcText], headerTexts = r, headerTexts + 1
      end
      local first, last, nextI, idAt
      if r then
        -- '@<r>': the limits' values of request r of this batch (r < j), not repeated; this request's
        -- own ids (as many as r's) follow the header
        if not (r < j and lasts[r]) then return fail('bad header of request ' .. j) end
        first, last, nextI = firsts[r], lasts[r], i + 3
        local ids = idCounts and idCounts[r]
        if ids then
          if i + 2 + ids > argCount then return fail('bad header of request ' .. j) end
          idAt, nextI = nextI, nextI + ids
        end
      else
        local argc = numbers[argcText]
        if argc == nil then
          argc = tonumber(argcText) or false
          numbers[argcText], headerTexts = argc, headerTexts + 1
        end
        if not (argc and argc >= 0 and i + 2 + argc <= argCount) then return fail('bad header of request ' .. j) end
        first, last = i + 3, i + 2 + argc
        nextI = last + 1
        argsEnd = nil -- set by the request's reading, below, where its values are good
      end
      if requestOperation == 'acquire' then
        if n == 1 then
          replies[j] = acquireOne(KEYS[keyBase + 1], first, last, r, idAt)
        else
          replies[j] = acquireRequest(keyBase, n, first, last, r, idAt)
        end
      elseif requestOperation == 'settle' or requestOperation == 'renew' then
        replies[j] = settleRequest(keyBase, n, first, last, requestOperation == 'renew', idAt)
      else
        replies[j] = fail('unknown operation ' .. tostring(requestOperation) .. ' of request ' .. j)
      end
      -- a later '@<j>' reads this request's values (without its ids) and sends as many ids; values
      -- that were bad have no known end: a reference to them fails the call (lasts[j] false)
      if r then
        firsts[j], lasts[j] = first, last
        if idAt then idCounts[j] = nextI - idAt end
      else
        local e = argsEnd
        if e then
          if e <= last then
            if not idCounts then idCounts = {} end
            idCounts[j] = last + 1 - e
          end
          last = e - 1
          firsts[j], lasts[j] = first, last
        else
          firsts[j], lasts[j] = first, false
        end
      end
      lastOperation, lastKeyBase, lastN, lastFirst, lastLast = requestOperation, keyBase, n, first, last
      lastIds = idCounts and idCounts[j] or 0
      keyBase = keyBase + n
      i = nextI
    end
  end
  if keyBase ~= keyCount or i ~= argCount + 1 then return fail('the requests must use every key and argument') end
  if pending then
    for key, value in pairs(pending) do write(key, value, pendingTtls[key]) end
  end
  return replies

end
