--[[
Concurrency ("algorithm": "concurrency"): the twin of model.ts. At most `max` slots held at once; a
slot is a lease, a member of a sorted set scored by its expiry (store clock, ms), so that a gateway
that dies mid-request leaks its slots no longer than their expiry. Expired members are purged on every
touch (ZREMRANGEBYSCORE), and the key itself expires with its last lease.

A snippet of acquire.lua that owns its key (`ownsKey`): it reads and writes its sorted set itself
instead of the script's GET/SET of a string state.

ARGV of one check, after the algorithm name and the cost (always 1; arity 3):
  max        most slots held at once; an integer >= 1
  leaseMs    how long the slot is held at most (the taking gateway's UPSTREAM_TIMEOUT_MS + 5 s); > 0
  leaseId    the slot's id, unique per request

acquire: admitted iff fewer than max live leases; then ZADD leaseId (now + leaseMs). Level = slots held
after the decision; a denial waits 1000 ms (docs/lifecycle.md: Retry-After: 1); resetMs is 0.
settle (ARGV after the 3 values: delta, admittedAtMs, refundMax, all ignored): ZREM leaseId.
renew (the script's "renew" operation, same ARGV as settle): a live leaseId's expiry becomes
now + leaseMs (ZADD XX); an expired one is not taken again (its slot may be another request's now).
Level = slots held, resetMs 0, as for settle.
A key holding anything but a sorted set (another algorithm's state) counts as no slot held.
]]
ALGORITHMS['concurrency'] = (function()
  -- the number of live leases, after purging the expired ones
  local function live(key, nowMs)
    local kind = redis.call('TYPE', key)['ok']
    if kind == 'none' then return 0 end
    if kind ~= 'zset' then
      redis.call('DEL', key)
      return 0
    end
    redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt(nowMs))
    return redis.call('ZCARD', key)
  end

  -- the key lives as long as its last lease (at least minTtlMs: tests walking a simulated clock)
  local function expireWithLastLease(key, nowMs, minTtlMs)
    local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    if #last == 0 then return end
    local ttlMs = math.max(tonumber(last[2]) - nowMs, minTtlMs)
    redis.call('PEXPIRE', key, string.format('%.0f', math.ceil(ttlMs)))
  end

  return {
    arity = 3,
    ownsKey = true,

    spec = function(argv, i)
      local s = { max = tonumber(argv[i]), leaseMs = tonumber(argv[i + 1]), leaseId = argv[i + 2] }
      if s.max and s.max >= 1 and s.max == math.floor(s.max) and s.max < math.huge
          and s.leaseMs and s.leaseMs > 0 and s.leaseMs < math.huge
          and s.leaseId and s.leaseId ~= '' then
        return s
      end
      return nil
    end,

    evaluate = function(s, _cost, key, nowMs)
      local held = live(key, nowMs)
      local allowed = held < s.max
      return {
        allowed = allowed,

        -- nothing charged: allowed, level, retryAfterMs, resetMs
        hold = function()
          if allowed then return allowed, held, 0, 0 end
          return allowed, held, 1000, 0
        end,

        -- charged (written here): level, resetMs
        charge = function(minTtlMs)
          redis.call('ZADD', key, fmt(nowMs + s.leaseMs), s.leaseId)
          expireWithLastLease(key, nowMs, minTtlMs)
          return redis.call('ZCARD', key), 0
        end,
      }
    end,

    -- given back (written here): level, resetMs
    settle = function(s, _delta, _admittedAtMs, key, nowMs)
      local held = live(key, nowMs)
      if held > 0 then
        redis.call('ZREM', key, s.leaseId)
        held = redis.call('ZCARD', key)
      end
      return held, 0
    end,

    -- kept for another leaseMs (written here): level, resetMs
    renew = function(s, _delta, _admittedAtMs, key, nowMs, minTtlMs)
      local held = live(key, nowMs)
      if held > 0 then
        redis.call('ZADD', key, 'XX', fmt(nowMs + s.leaseMs), s.leaseId)
        expireWithLastLease(key, nowMs, minTtlMs)
      end
      return held, 0
    end,
  }
end)()
