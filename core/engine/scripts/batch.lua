-- Batches (docs/batches.md): create one, or apply a member's end to it. Global slot only.
-- KEYS: 1 batch, 2 members, 3 order, 4 results, 5 its `complete` event list, 6 its `success`
--       event list (what wait() blocks on), 7 batches (index), 8 batches:expiry, 9 batches:send
--       (the global outbox), 10 parent batch, 11 parent members, 12 parent order (10-12: the
--       batch's own keys again when it has no parent)
-- ARGV: 1 mode, 2 batch id, 3 batch ttl ms (how long a finished batch is kept: 'create'
--       stores it on the batch, 'end' reads it from there), then
--   'create': 4 description, 5 callbacks JSON, 6 has on_complete (0/1), 7 has on_success
--             (0/1), 8 pass_results (0/1), 9 parent id ('' = none), then the members
--             (`queue:id`), in enqueue order (a repeated one counts once)
--   'end':    4 member, 5 outcome ('done' or 'failed'), 6 fence, 7 result JSON ('' = none),
--             8 an entry of batches:send to remove with it ('' = none: the caller removes the
--             entry from its queue's outbox, another slot)
-- Returns: 'create': {'created' or 'exists', total}; 'end': 'applied', 'stale' (a fence not
--          larger than the member's: a replayed or older end, nothing changed), 'unknown'
--          (no such member) or 'gone' (no such batch: expired, or never made).
-- A member's end is applied once per fence: a member counted failed that ends done later (a
-- redo) moves from failed to done. The first time every member has ended the batch is
-- complete; the first time every member is done, successful: each happens once, and pushes
-- its callback (and, for a child batch, its end in the parent) onto batches:send in the same
-- call, which the relay then sends with a once-guard (enqueue.lua).
local mode, id, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])
local now = now_ms()

local function keep_for(ms)
  for i = 1, 6 do redis.call('PEXPIRE', KEYS[i], ms) end
  redis.call('ZADD', KEYS[8], now + ms, id)
end

-- every member ended: complete (once); every member done: successful (once)
local function check()
  local b = redis.call('HMGET', KEYS[1], 'total', 'done', 'failed', 'complete', 'success',
    'parent', 'cb_complete', 'cb_success')
  local total, done, failed = tonumber(b[1]), tonumber(b[2]), tonumber(b[3])
  local parent = b[6] or ''
  local fired = false
  local completed_now = false
  if done + failed >= total and not b[4] then
    redis.call('HSET', KEYS[1], 'complete', now)
    if b[7] == '1' then redis.call('RPUSH', KEYS[9], 'cb\t' .. id .. '\tcomplete') end
    if parent ~= '' then
      redis.call('RPUSH', KEYS[9], table.concat({'up', parent, '@' .. id,
        failed > 0 and 'failed' or 'done', '1'}, '\t'))
    end
    redis.call('RPUSH', KEYS[5], 'complete')
    fired, completed_now = true, true
  end
  if done >= total and not b[5] then
    redis.call('HSET', KEYS[1], 'success', now)
    if b[8] == '1' then redis.call('RPUSH', KEYS[9], 'cb\t' .. id .. '\tsuccess') end
    -- a child that completed with failures, then succeeded (redo): done in its parent now
    if parent ~= '' and not completed_now then
      redis.call('RPUSH', KEYS[9], table.concat({'up', parent, '@' .. id, 'done', '2'}, '\t'))
    end
    redis.call('RPUSH', KEYS[6], 'success')
    fired = true
  end
  if fired then keep_for(ttl) end
end

-- finished batches leave the index once their keys expired (bounded work per call)
local function trim()
  local old = redis.call('ZRANGEBYSCORE', KEYS[8], '-inf', now, 'LIMIT', 0, 20)
  for _, gone in ipairs(old) do
    redis.call('ZREM', KEYS[7], gone)
    redis.call('ZREM', KEYS[8], gone)
  end
end

if mode == 'create' then
  if redis.call('EXISTS', KEYS[1]) == 1 then
    return {'exists', tonumber(redis.call('HGET', KEYS[1], 'total') or '0')}
  end
  local total = 0
  for i = 10, #ARGV do
    if redis.call('HSETNX', KEYS[2], ARGV[i], '') == 1 then
      redis.call('RPUSH', KEYS[3], ARGV[i])
      total = total + 1
    end
  end
  local parent = ARGV[9]
  redis.call('HSET', KEYS[1], 'description', ARGV[4], 'created', now, 'total', total,
    'done', 0, 'failed', 0, 'parent', parent, 'callbacks', ARGV[5], 'cb_complete', ARGV[6],
    'cb_success', ARGV[7], 'pass_results', ARGV[8], 'ttl', ttl)
  redis.call('ZADD', KEYS[7], now, id)
  if parent ~= '' and redis.call('EXISTS', KEYS[10]) == 1
      and redis.call('HSETNX', KEYS[11], '@' .. id, '') == 1 then
    redis.call('HINCRBY', KEYS[10], 'total', 1)  -- the parent waits for this child
    redis.call('RPUSH', KEYS[12], '@' .. id)
  end
  trim()
  if total == 0 then check() end  -- an empty batch is complete and successful at once
  return {'created', total}
end

-- mode 'end'
local function answer(outcome)
  if ARGV[8] ~= '' then redis.call('LREM', KEYS[9], 1, ARGV[8]) end
  return outcome
end
if redis.call('EXISTS', KEYS[1]) == 0 then return answer('gone') end
ttl = tonumber(redis.call('HGET', KEYS[1], 'ttl')) or ttl
local member, outcome, fence, result = ARGV[4], ARGV[5], tonumber(ARGV[6]), ARGV[7]
local stored = redis.call('HGET', KEYS[2], member)
if not stored then return answer('unknown') end
local was, seen = '', -1
if stored ~= '' then
  local f = fields(stored, 2)
  was, seen = f[1], tonumber(f[2]) or -1
end
if fence <= seen then return answer('stale') end
redis.call('HSET', KEYS[2], member, outcome .. '\t' .. ARGV[6])
if was ~= outcome then
  if was ~= '' then redis.call('HINCRBY', KEYS[1], was, -1) end
  redis.call('HINCRBY', KEYS[1], outcome, 1)
end
if result ~= '' and redis.call('HGET', KEYS[1], 'pass_results') == '1' then
  redis.call('HSET', KEYS[4], member, result)
  local left = redis.call('PTTL', KEYS[1])  -- a batch that ended keeps its keys for its ttl
  if left > 0 then redis.call('PEXPIRE', KEYS[4], left) end
end
check()
trim()
return answer('applied')
