-- Lease up to N ready tasks, highest priority first, FIFO within a level.
-- KEYS: 1 tasks, 2 ready:high, 3 ready:normal, 4 ready:low, 5 running, 6 paused, 7 wake,
--       8 fence (the queue's lease counter), 9 config (`max_running`: leases at once, queue-
--       wide; a lease counts until it is acked, failed, released or reaped; `max_pending`
--       and `when_full`: see room_made), 10 overflow, 11 room, 12 waiter, 13 hand,
--       14 fetched (this executor's last fetch that took tasks: request id TAB id TAB
--       token ..., kept for the lease's length), 15 done, 16 history, 17 stats (this
--       minute), 18 stats (these 5 minutes), 19 totals (KEYS 15-19: for expired tasks;
--       19 also counts `throttled`: fetches a rate limit held back), 20 batch_out (an
--       expired batch member's end, as failed: docs/batches.md), 21 rate (the queue's rate
--       limit state: `tat`, and `slot` / `who`, the executor registered for the next token;
--       _lib.lua), 22 delayed, 23 schedule (a task whose own rate limit has no token now is
--       held in `delayed` until the token reserved for it: state `delayed` with `held`, back
--       at the head of its level then; its scheduler is woken: _lib.lua task_gate,
--       promote.lua)
-- ARGV: 1 worker id, 2 thread name, 3 lease_ms, 4 max tasks, 5 wait_ms (> 0: when nothing
--       is taken, register the caller as the queue's waiting executor for that long, so
--       that the next enqueue leases its task straight to it: see enqueue.lua), 6 request
--       id ('' or absent: none). A fetch sent again with the request id of the one that
--       took the tasks kept in `fetched` (its reply was lost) gets those leases again (the
--       ones it still holds, as they are) and takes nothing new: docs/design.md, "Lost
--       replies". 7 result ttl ms of an expired task's record (0 = drop it now; absent:
--       1 hour), 8 history maxlen (absent: 10000)
-- Expiry: a popped task whose `exp` passed (docs/queue-controls.md, "Expiry") is not leased:
--          it ends as `expired` (record kept in `done` for the result ttl, a history entry
--          with status `expired`, the stats' `expired` counts) and the fetch takes the next
--          one; so does a task an enqueue handed to this caller that it takes too late.
-- Returns: {registered (1/0), request id, id, token, failures, payload, left, ...}. When the
--          queue's `rate_limit` has no token for a task that is ready the fetch takes
--          nothing and returns {2, request id} (another executor is registered for the next
--          token: wait on the wake list as when idle) or {3, request id, ms until the next
--          token} (the caller is now that executor: it sleeps until then, then fetches).
--          `token` is the fencing token that ack/fail/renew/progress/release must present: it comes
--          from the queue's counter, so it is larger than every token handed out before
--          for any task of the queue. `failures` is how many runs of this series failed
--          before (what `retries` counts). `left` is the ms until the task expires (-1:
--          it does not), for a worker that holds it a while before it starts. A task an
--          enqueue handed to this caller and that it did not take off the hand list yet is
--          returned alone (it is leased already).
local worker, thread, lease, limit = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local wait_ms, rid = tonumber(ARGV[5] or '0'), ARGV[6] or ''
local now = now_ms()
local ttl, maxlen = tonumber(ARGV[7] or '3600000'), ARGV[8] or '10000'
local stats = {}  -- the expired ones' counts
local EXPIRED_MAX = 1000
-- ms until a task's expiry, -1 for none
local function left_of(meta)
  return type(meta.exp) == 'number' and meta.exp - now or -1
end
-- A task not started by its expiry: it ends as `expired`, like a finished record, without
-- a run (it is not leased, or its unused lease is dropped).
local function end_expired(id, meta, payload)
  if meta.batch then member_end(KEYS[20], meta.batch, id, 'failed', meta.fence or '0', '') end
  if meta.state == 'running' then
    redis.call('ZREM', KEYS[5], id)
    clear_run(meta, KEYS[1])
    meta.attempts = (meta.attempts or 1) > 1 and meta.attempts - 1 or nil
    meta.started = nil
  end
  local name = string.match(payload, '^%[%s*"([%w_.]+)"')
  if not name then
    local ok, data = pcall(cjson.decode, payload)
    name = ok and type(data) == 'table' and type(data.task) == 'string' and data.task or ''
  end
  if not OOM then  -- a full Redis: history yields (_lib.lua, keep_compact)
    redis.call('XADD', KEYS[16], 'MAXLEN', '~', maxlen, '*', 'id', id, 'task', name,
      'status', 'expired', 'worker', '', 'thread', '', 'enqueued', meta.enqueued or 0,
      'started', 0, 'ended', now, 'runtime_ms', 0, 'summary', '', 'comment', '')
  end
  stats.expired = (stats.expired or 0) + 1
  meta.state, meta.ended = 'expired', now
  keep_finished(KEYS[1], KEYS[15], id, meta, payload, ttl, now)
end
-- the reply, after the counts of the expired ones and a sweep of finished records: as many
-- as it ended and 20 more, and 20 when it took nothing (an idle queue's, or one whose tasks
-- all expire, gets no ack that would sweep them)
local function counted(out)
  if stats.expired then save_stats(stats, KEYS[17], KEYS[18], KEYS[19]) end
  if stats.expired or #out <= 2 then
    sweep_finished(KEYS[1], KEYS[15], now, 20 + (stats.expired or 0))
  end
  if OOM then yield_finished(KEYS[1], KEYS[15], KEYS[19], 20) end  -- a full Redis: _lib.lua
  return out
end
-- the same request again (its reply was lost): what it took, as far as it still holds it
if rid ~= '' then
  local kept = redis.call('GET', KEYS[14])
  if kept and string.sub(kept, 1, #rid + 1) == rid .. '\t' then
    local out, parts = {0, rid}, {}
    for part in string.gmatch(string.sub(kept, #rid + 2), '[^\t]+') do
      parts[#parts + 1] = part
    end
    for i = 1, #parts - 1, 2 do
      local id, token = parts[i], parts[i + 1]
      local meta, payload = load(KEYS[1], id)
      if holds(meta, token, worker) and meta.thread == thread then
        local n = #out
        out[n + 1], out[n + 2], out[n + 3], out[n + 4] = id, token, meta.failures or 0, payload
        out[n + 5] = left_of(meta)
      end
    end
    return out
  end
end
-- what this request took, for the same request sent again (kept as long as the lease)
local function taken_by_request(list)
  if rid ~= '' then
    local kept = rid .. '\t' .. table.concat(list, '\t')
    redis.call('SET', KEYS[14], kept, 'PX', math.max(lease, 1000))
  end
end
-- the caller stops waiting: it is not the queue's waiter any more, and takes what was handed
local waiter = redis.call('GET', KEYS[12])
if waiter then
  local w = fields(waiter, 4)
  if w[1] == worker and w[2] == thread then redis.call('DEL', KEYS[12]) end
end
local handed = redis.call('LINDEX', KEYS[13], 0)
if handed then
  local h = fields(handed, 6)
  if h[1] == worker and h[2] == thread then
    redis.call('LPOP', KEYS[13])
    local meta = load(KEYS[1], h[5])
    if not expired(meta, now) or not holds(meta, h[3], worker) then
      taken_by_request({h[5], h[3]})
      return {0, rid, h[5], h[3], h[4], h[6], meta and left_of(meta) or -1}
    end
    end_expired(h[5], meta, h[6])  -- taken too late: it goes on as a fetch
    slot_freed(KEYS[9], KEYS[7], {high = KEYS[2], normal = KEYS[3], low = KEYS[4]})
  end
end
if redis.call('EXISTS', KEYS[6]) == 1 then return counted({0, rid}) end
local capped = false
local cfg = redis.call('HMGET', KEYS[9], 'max_running', 'max_pending', 'when_full',
  'rate_limit', 'rate_burst', 'task_rates')
local cap = cfg[1]
if cap then
  local free = tonumber(cap) - redis.call('ZCARD', KEYS[5])
  if free <= 0 then return counted({0, rid}) end
  if free <= limit then limit, capped = free, true end
end
-- the rate limit: take at most the tokens there are; none, while tasks wait: throttled
local rate_t, rate_tau = rate_of(cfg[4], cfg[5])
local rate_tat, rated = nil, false
if rate_t and limit > 0 then
  local avail
  avail, rate_tat = rate_tokens(KEYS[21], rate_t, rate_tau, now)
  if avail == 0 and pending({high = KEYS[2], normal = KEYS[3], low = KEYS[4]}, KEYS[1], true) > 0 then
    redis.call('HINCRBY', KEYS[19], 'throttled', 1)
    if rate_sleeper(KEYS[21], now, worker, thread) then return {2, rid} end
    local slot = math.ceil(rate_tat - rate_tau)
    redis.call('HSET', KEYS[21], 'slot', slot, 'who', worker .. '\t' .. thread)
    rate_keep(KEYS[21], rate_tat, now)
    return {3, rid, math.max(1, slot - now)}
  end
  if avail <= limit then limit, rated = avail, true end
  if not rate_sleeper(KEYS[21], now, worker, thread) then  -- it was this caller's: done
    redis.call('HDEL', KEYS[21], 'slot', 'who')
  end
end
local taken, held, HOLD_MAX = {}, 0, 100  -- at most 100 held per call: the call stays short
local left = redis.call('HMGET', KEYS[1], '#high', '#normal', '#low', '#keyed')  -- _lib.lua
local ended = 0  -- expired tasks met: at most EXPIRED_MAX a call (bounded work)
for i, level in ipairs({'high', 'normal', 'low'}) do
  while #taken < limit and ended < EXPIRED_MAX do
    local entry = redis.call('LPOP', KEYS[i + 1])
    if not entry then break end
    -- a leftover (a deleted or moved task's old entry) is dropped with its mark
    local id, meta, payload = popped(KEYS[1], level, entry, 'queued', left[i] ~= false)
    local due = nil
    if id and expired(meta, now) then  -- an expired one takes no token, and never waits
      end_expired(id, meta, payload)
      ended = ended + 1
      id = nil
    else
      due = id and cfg[6] and task_gate(KEYS[9], KEYS[21], meta, payload, now)
    end
    if due then  -- its own rate limit: held until its token (never failed, never retried)
      meta.state, meta.due, meta.held = 'delayed', due, 1
      save(KEYS[1], id, meta, payload)
      redis.call('ZADD', KEYS[22], due, id)
      held = held + 1
      if held >= HOLD_MAX then break end
    elseif id then
      taken[#taken + 1] = {id, meta, payload}
    end
  end
  if held >= HOLD_MAX then break end
end
if held > 0 then wake(KEYS[23]) end  -- a scheduler may have to wake up sooner
-- keyed tasks wait (`#keyed`): the keys take turns for what the plain lists left (_keyed.lua)
local keyed_wait = left[4] and #taken < limit and ended < EXPIRED_MAX
  and KEYED.take(KEYS[1], taken, limit, now, end_expired, worker, thread)
-- the queue drained by #taken: fill it from its overflow buffer, free blocked producers
if cfg[2] or redis.call('LLEN', KEYS[10]) > 0 then
  local q = {tasks = KEYS[1], ready = {high = KEYS[2], normal = KEYS[3], low = KEYS[4]},
             overflow = KEYS[10], room = KEYS[11], wake = KEYS[7]}
  room_made(q, tonumber(cfg[2]), cfg[3], #taken + ended, 1000)
end
-- stopped by the bound on expired tasks: another fetch (a woken executor) goes on
if ended >= EXPIRED_MAX then wake(KEYS[7]) end
if #taken == 0 then
  -- an idle executor: the queue's waiter, unless another one is (a live registration) or
  -- a handed task still waits for its executor to take it
  if keyed_wait then return counted({keyed_wait[1], rid, keyed_wait[2]}) end
  if wait_ms > 0 and redis.call('LLEN', KEYS[13]) == 0 then
    local other = redis.call('GET', KEYS[12])
    if not other or tonumber(fields(other, 4)[4]) <= now then
      redis.call('SET', KEYS[12], worker .. '\t' .. thread .. '\t' .. lease .. '\t' ..
        string.format('%d', now + wait_ms), 'PX', wait_ms + 1000)
      return counted({1, rid})
    end
  end
  return counted({0, rid})
end
if rate_t then rate_take(KEYS[21], rate_tat, rate_t, #taken, now) end
local out, kept = {0, rid}, {}
local first = redis.call('INCRBY', KEYS[8], #taken) - #taken
for i, t in ipairs(taken) do
  local id, meta, payload = t[1], t[2], t[3]
  lease_to(meta, first + i, worker, thread, now)
  save(KEYS[1], id, meta, payload)
  redis.call('ZADD', KEYS[5], now + lease, id)
  out[#out + 1] = id
  out[#out + 1] = meta.fence
  out[#out + 1] = meta.failures or 0
  out[#out + 1] = payload
  out[#out + 1] = left_of(meta)
  kept[#kept + 1] = id
  kept[#kept + 1] = meta.fence
end
taken_by_request(kept)
-- more is ready than this caller took: wake another idle worker (chain wake-up), unless the
-- running limit is what stopped it (the end of a run wakes the next one, see slot_freed),
-- or the rate limit did and an executor sleeps until its next token (without one, the
-- woken executor registers for it)
if #taken == limit and not capped and not (rated and rate_sleeper(KEYS[21], now)) then
  for i = 2, 4 do
    if redis.call('LLEN', KEYS[i]) > 0 then wake(KEYS[7]); break end
  end
end
return counted(out)
