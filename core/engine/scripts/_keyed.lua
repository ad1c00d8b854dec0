-- Keyed tasks (docs/queue-controls.md, "Per-key limits and fair turns"), appended to _lib.lua
-- for every script. A task enqueued with a key never enters the queue's plain ready lists:
-- it waits in its key's own lists (one per priority level) and the queue keeps a rotation of
-- the keys that have tasks ready. A fetch (fetch.lua, after the plain lists) takes the next
-- key in turn, one task (W for a key of weight W), and puts the key back at the end of the
-- line: a key with 100,000 tasks and a key with 10 progress alike. A key at its limit (running, rate, paused) is
-- parked: taken out of the rotation, so no fetch looks at it again until what parked it ends
-- (a lease of the key ends: clear_run; its next token is due: the `due` zset; it is resumed).
-- Work per fetch is O(1) in the number of waiting keys.
--
-- Keys (all under the queue's hash tag, derived from its tasks key `<p>tasks`: one slot, so
-- Cluster holds; ACLs must allow `<prefix>:*`):
--   <p>k:turns        list: the rotation (each key at most once, while its state is 'r')
--   <p>k:state        hash: key -> 'r' in the rotation, 'c' parked at its concurrency,
--                     't' parked until its next token (in k:due), 'p' paused; absent: no
--                     task ready (or not looked at since it ran dry)
--   <p>k:wait         zset: key -> tasks waiting in its lists (the busiest: ZREVRANGE)
--   <p>k:run          zset: key -> leases it holds now (a lease that counts carries `ks`)
--   <p>k:due          zset: key -> when its next token is due (ms, Redis's clock)
--   <p>k:rate         hash: 'k:'..key -> GCRA arrival time of its next start; `slot`/`who`
--                     the executor registered to fetch at the next token (as _lib.lua's)
--   <p>k:paused       set: paused keys (an operator's pause of one key)
--   <p>k:weight       hash: key -> its weight W > 1 (an operator's: W tasks a turn; absent: 1)
--   <p>k:used         hash: key -> tasks taken in its current turn (a weighted key only)
--   <p>k:r:<level>:<key>  list: the key's ready entries at that priority level
-- The tasks hash keeps `#keyed` (tasks waiting in keyed lists: `pending` counts them) and
-- `#kseq` (a counter: every keyed entry is `<id>#k<n>`, unique, kept on the record as
-- `entry`; an entry whose record moved on is dropped when met, so a delete needs no mark).
-- The record keeps `key`, `kc` (its concurrency per key), `kr` (its rate per key 'N/u B').

KEYED.cache = {}

function KEYED.names(tasks)
  local k = KEYED.cache[tasks]
  if k then return k end
  local p = string.sub(tasks, 1, -6)  -- '<prefix>:{q}:' of '<prefix>:{q}:tasks'
  k = {p = p, turns = p .. 'k:turns', state = p .. 'k:state', wait = p .. 'k:wait',
    run = p .. 'k:run', due = p .. 'k:due', rate = p .. 'k:rate', paused = p .. 'k:paused',
    weight = p .. 'k:weight', used = p .. 'k:used', wake = p .. 'wake', config = p .. 'config'}
  KEYED.cache[tasks] = k
  return k
end

function KEYED.list(k, key, level)
  return k.p .. 'k:r:' .. level .. ':' .. key
end

-- The priority field of an enqueue of a keyed task: 'level TAB kc TAB kr TAB key'
-- (engine/keyed.py builds it); the plain level and the record's key fields.
function KEYED.parse(prio)
  local f = fields(prio, 4)
  return f[1], {key = f[4], kc = tonumber(f[2]), kr = f[3] ~= '' and f[3] or nil}
end

function KEYED.mark(meta, info)
  meta.key, meta.kc, meta.kr = info.key, info.kc, info.kr
end

-- (back) in the rotation: at the end of the line, or at its head (`first`)
local function key_turn(k, key, head)
  redis.call('HSET', k.state, key, 'r')
  redis.call(head and 'LPUSH' or 'RPUSH', k.turns, key)
end

-- A task of `key` was taken: a key of weight W keeps the head of the line for W takes in a
-- row (its count of this turn in k:used), then goes to the end like any other
local function turn_taken(k, key)
  local w = tonumber(redis.call('HGET', k.weight, key))
  if w and w > 1 and redis.call('HINCRBY', k.used, key, 1) < w then
    key_turn(k, key, true)
    return
  end
  if w then redis.call('HDEL', k.used, key) end
  key_turn(k, key, false)  -- the end of the line (dropped on its turn if dry)
end

-- a key out of the rotation (dry or parked) starts its next turn afresh
local function turn_ended(k, key)
  redis.call('HDEL', k.used, key)
end

local function counted_wait(k, tasks, key, by)
  if redis.call('ZINCRBY', k.wait, by, key) + 0 <= 0 then redis.call('ZREM', k.wait, key) end
  if redis.call('HINCRBY', tasks, '#keyed', by) <= 0 then redis.call('HDEL', tasks, '#keyed') end
end

-- push_ready of a keyed task (_lib.lua): into its key's list of its level; the key joins
-- the rotation unless it is in it or parked
function KEYED.push(tasks, id, meta, payload, head)
  local k, key = KEYED.names(tasks), meta.key
  meta.entry = id .. '#k' .. redis.call('HINCRBY', tasks, '#kseq', 1)
  save(tasks, id, meta, payload)
  redis.call(head and 'LPUSH' or 'RPUSH', KEYED.list(k, key, level_of(meta.prio)), meta.entry)
  counted_wait(k, tasks, key, 1)
  if not redis.call('HGET', k.state, key) then
    if redis.call('SISMEMBER', k.paused, key) == 1 then
      redis.call('HSET', k.state, key, 'p')
    else
      key_turn(k, key, head)
    end
  end
end

-- leave() of a keyed task (deleted, moved to the head): its entry stays and is dropped when
-- met (the record's `entry` no longer names it); the counts move now
function KEYED.leave(tasks, meta)
  counted_wait(KEYED.names(tasks), tasks, meta.key, -1)
  meta.entry = nil
end

-- clear_run() of a lease that held a slot of its key: the slot frees, and a key parked at
-- its concurrency goes back in the rotation (one idle executor is woken for it)
function KEYED.release(tasks, meta)
  local k, key = KEYED.names(tasks), meta.key
  meta.ks = nil
  if redis.call('ZINCRBY', k.run, -1, key) + 0 <= 0 then redis.call('ZREM', k.run, key) end
  if redis.call('HGET', k.state, key) == 'c' then
    key_turn(k, key, false)
    wake(k.wake)
  end
end

-- The key's first live task (highest level first), without taking it: (id, meta, payload,
-- list); entries whose record moved on are dropped (at most `budget.n` per call).
local function key_head(k, tasks, key, budget)
  for _, level in ipairs({'high', 'normal', 'low'}) do
    local list = KEYED.list(k, key, level)
    while budget.n > 0 do
      local entry = redis.call('LINDEX', list, 0)
      if not entry then break end
      local hash = string.find(entry, '#', 1, true)
      local id = string.sub(entry, 1, (hash or 0) - 1)
      local meta, payload = load(tasks, id)
      if meta and meta.state == 'queued' and meta.entry == entry then
        return id, meta, payload, list
      end
      redis.call('LPOP', list)
      budget.n = budget.n - 1
    end
  end
  return nil
end

local function key_cap(kc, qcap)
  if kc and qcap then return math.min(kc, qcap) end
  return kc or qcap
end

-- The per-key GCRA (as _lib.lua's rate_tokens/rate_take, one field per key): nil when a
-- start conforms now (its token is taken), else when the next one does
local function key_token(k, key, spec, now)
  local t, tau = rate_of(string.match(spec, '^(%S+)'), string.match(spec, ' (%d+)$'))
  if not t then return nil end
  local field = 'k:' .. key
  local tat = math.max(tonumber(redis.call('HGET', k.rate, field) or '0') or 0, now)
  if tat - tau > now then return math.ceil(tat - tau) end
  redis.call('HSET', k.rate, field, string.format('%.17g', tat + t))
  rate_keep(k.rate, tat + t, now)
  return nil
end

-- Take up to `want` - #taken keyed tasks into `taken` ({id, meta, payload}), one per key in
-- turn. `on_expired(id, meta, payload)` ends a task whose expiry passed (it takes no slot
-- and no token). Returns nil, or when nothing was taken and a key waits for its token:
-- {2} (another executor is registered for it) or {3, ms} (the caller now is: fetch then).
function KEYED.take(tasks, taken, want, now, on_expired, worker, thread)
  local k = KEYED.names(tasks)
  -- keys whose token is due are back in the rotation
  for _, key in ipairs(redis.call('ZRANGEBYSCORE', k.due, '-inf', now, 'LIMIT', 0, 100)) do
    redis.call('ZREM', k.due, key)
    if redis.call('HGET', k.state, key) == 't' then key_turn(k, key, false) end
  end
  local qcap = tonumber(redis.call('HGET', k.config, 'key_concurrency'))
  local budget = {n = 1000}  -- stale entries dropped per call: bounded work
  local steps, start = 0, #taken
  while #taken < want and steps < want - start + 100 and budget.n > 0 do
    steps = steps + 1
    local key = redis.call('LPOP', k.turns)
    if not key then break end
    local id, meta, payload, list = key_head(k, tasks, key, budget)
    if not id then
      redis.call('HDEL', k.state, key)  -- ran dry: out of the rotation
      turn_ended(k, key)
      local tat = tonumber(redis.call('HGET', k.rate, 'k:' .. key))
      if tat and tat <= now then redis.call('HDEL', k.rate, 'k:' .. key) end
    elseif redis.call('SISMEMBER', k.paused, key) == 1 then
      redis.call('HSET', k.state, key, 'p')
      turn_ended(k, key)
    else
      local cap = key_cap(meta.kc, qcap)
      local due = nil
      if cap and (tonumber(redis.call('ZSCORE', k.run, key)) or 0) >= cap then
        redis.call('HSET', k.state, key, 'c')
        turn_ended(k, key)
      else
        due = not expired(meta, now) and meta.kr and key_token(k, key, meta.kr, now)
        if due then
          redis.call('HSET', k.state, key, 't')
          redis.call('ZADD', k.due, due, key)
          turn_ended(k, key)
        else
          redis.call('LPOP', list)
          counted_wait(k, tasks, key, -1)
          meta.entry = nil
          if expired(meta, now) then
            on_expired(id, meta, payload)
          else
            meta.ks = 1  -- this lease holds a slot of its key (KEYED.release)
            redis.call('ZINCRBY', k.run, 1, key)
            taken[#taken + 1] = {id, meta, payload}
          end
          turn_taken(k, key)
        end
      end
    end
  end
  if #taken > start then
    if redis.call('LLEN', k.turns) > 0 then wake(k.wake) end  -- chain wake-up
    return nil
  end
  local nxt = redis.call('ZRANGE', k.due, 0, 0, 'WITHSCORES')
  if #nxt == 0 then return nil end
  if rate_sleeper(k.rate, now, worker, thread) then return {2} end
  local slot = tonumber(nxt[2])
  redis.call('HSET', k.rate, 'slot', slot, 'who', worker .. '\t' .. thread)
  rate_keep(k.rate, slot, now)
  return {3, math.max(1, slot - now)}
end

-- A purge of a queue's ready tasks (remove.lua), its keyed part: the keys that have tasks
-- waiting (k:wait), each key's lists emptied level by level; a live entry is handed to
-- `gone(id, meta)` and counted in `n.taken`, a leftover in `n.dropped`, until `n.limit`
-- tasks or `n.most` leftovers. A key left with no task drops out of the rotation when its
-- turn comes (KEYED.take), as after any delete.
function KEYED.purge(tasks, n, gone)
  local k = KEYED.names(tasks)
  while n.taken < n.limit and n.dropped < n.most do
    local key = redis.call('ZRANGE', k.wait, 0, 0)[1]
    if not key then return end
    local emptied = true
    for _, level in ipairs({'high', 'normal', 'low'}) do
      local list = KEYED.list(k, key, level)
      while n.taken < n.limit and n.dropped < n.most do
        local entry = redis.call('LPOP', list)
        if not entry then break end
        local id = string.sub(entry, 1, (string.find(entry, '#', 1, true) or 0) - 1)
        local meta = load(tasks, id)
        if meta and meta.state == 'queued' and meta.entry == entry then
          counted_wait(k, tasks, key, -1)
          gone(id, meta)
          n.taken = n.taken + 1
        else
          n.dropped = n.dropped + 1
        end
      end
      if redis.call('EXISTS', list) == 1 then emptied = false end
    end
    -- a count left on a key whose lists are empty would make this loop spin: it is wrong
    -- (never expected), so it goes
    if emptied then redis.call('ZREM', k.wait, key) end
  end
end

-- Every key parked for `why` ('c': its running limit changed) takes its turn again; how many
function KEYED.unpark(tasks, why)
  local k, n = KEYED.names(tasks), 0
  local all = redis.call('HGETALL', k.state)
  for i = 1, #all, 2 do
    if all[i + 1] == why then
      key_turn(k, all[i], false)
      n = n + 1
    end
  end
  return n
end

-- An operator gives one key a weight: W tasks a turn (1: one, as every key)
function KEYED.weigh(tasks, key, w)
  local k = KEYED.names(tasks)
  if w > 1 then
    redis.call('HSET', k.weight, key, w)
  else
    redis.call('HDEL', k.weight, key)
    redis.call('HDEL', k.used, key)
  end
  return 1
end

-- An operator pauses (on) or resumes one key: a paused key's tasks wait (they stay counted);
-- resumed, it goes back in the rotation and an idle executor is woken.
function KEYED.pause(tasks, key, on)
  local k = KEYED.names(tasks)
  if on then
    redis.call('SADD', k.paused, key)
    return 1
  end
  redis.call('SREM', k.paused, key)
  if redis.call('HGET', k.state, key) == 'p' then
    key_turn(k, key, false)
    wake(k.wake)
  end
  return 1
end
