-- Enqueue tasks of one queue, deduplicating each by id (one task, or a batch of them).
-- KEYS: 1 tasks, 2 ready:high, 3 ready:normal, 4 ready:low, 5 delayed, 6 errors, 7 done,
--       8 wake, 9 cronlast, 10 schedule, 11 config (`max_pending`, `when_full`), 12 overflow,
--       13 totals (counters: `refused`, `overflowed`), 14 paused, 15 running, 16 fence,
--       17 waiter, 18 hand, 19 rate (the queue's rate limit state, _lib.lua), 20 (optional)
--       the call's request key (`req:<request id>`, made by the client once per call: the
--       same call sent again after a lost reply carries the same one): when it holds an
--       answer the call was applied already and gets that answer, changing nothing; else
--       the answer is kept there for the request window (ms, an ARGV after the tasks'),
--       21 (optional) a once-guard: the call's `once` key (a batch callback,
--       docs/batches.md): the task is enqueued only if that key is not set, and the key is
--       set (for the TTL in ms given as the last ARGV) unless a full queue refused the task
-- ARGV: 9 fields per task: id, payload JSON, priority, delay_ms (0 = now; an absolute eta is
--       turned into a delay by the client), first (0/1), cron entry name ('' = not cron),
--       cron tick (ms), expires_ms ('0' = none: else the task is stored with its expiry
--       `exp` = now + expires_ms on Redis's clock, and no lease is given once it passed),
--       batch id ('' = none: the task is a member of that batch, kept on its record as
--       `batch`); with KEYS[20], the request window (ms); with KEYS[21], the once TTL (ms)
-- Returns: {id, outcome, id, outcome, ...}: outcome is 'added', 'exists', 'moved' (first=1
--          moved a pending one to the head), 'rerun' (identical task running: it runs once
--          more after it ends), 'skipped' (this cron tick was enqueued already), 'full' (the
--          queue holds `max_pending` ready tasks: nothing was written; the client raises or
--          waits for room) or 'overflow' (full, `when_full = buffer`: the task waits in the
--          overflow buffer and enters the queue as it drains), 'once' (the once-guard was
--          set: this call was enqueued before, nothing was written). A repeated request
--          gets the first answer (a call all of whose tasks met a full queue wrote nothing
--          and keeps none: sent again, it is tried again).
-- A limit bounds new tasks for now only: a delayed task, `first` (run before the rest), and
-- what was accepted before (retries, redo, reaped runs) are never refused.
-- A new task for now that finds the queue empty, while an idle executor waits for it (fetch
-- registered it as the queue's waiter), is leased straight to that executor and put on the
-- queue's hand list, which the executor blocks on: enqueue to start is one round trip. The
-- lease is an ordinary one (fence, running, deadline): a dead executor's is reaped.
-- With a `rate_limit` the hand-over takes a token (none left: the task waits in ready), and
-- no wake-up token is pushed while an executor sleeps until the next token (fetch.lua). A
-- queue with task-level rate limits (`task_rates`) hands nothing over: the fetch checks them.
local last = #ARGV  -- the tasks' last ARGV
if KEYS[21] then last = last - 1 end
local req = KEYS[20]
-- the registered idle executor (read once: only hand_over changes it here), and with a
-- request key the call's kept answer, in one MGET (both strings of the queue's slot)
local registered, answered
if req then
  last = last - 1
  local got = redis.call('MGET', KEYS[17], req)
  registered, answered = got[1], got[2]
  -- a request answered before (its reply was lost, the client sent it again): its answer,
  -- whatever happened to its tasks since (handed over, run, done)
  if answered then
    local out = {}
    for n = 1, #answered do
      out[#out + 1] = ARGV[(n - 1) * 9 + 1]
      out[#out + 1] = ENQUEUED[tonumber(string.sub(answered, n, n))]
    end
    return out
  end
else
  registered = redis.call('GET', KEYS[17])
end
local ready = {high = KEYS[2], normal = KEYS[3], low = KEYS[4]}
local now = now_ms()
local cfg = redis.call('HMGET', KEYS[11], 'max_pending', 'when_full', 'max_running',
  'rate_limit', 'rate_burst', 'task_rates')
local rate_t, rate_tau = rate_of(cfg[4], cfg[5])
local limit, when_full = tonumber(cfg[1]), cfg[2] or 'raise'
local waiting = nil  -- tasks in the ready lists, counted once, when a limit is set
-- wake tokens owed, pushed once at the end (a batch of 500 tasks: one LLEN, <= 16 LPUSH)
local woken, scheduled = 0, 0

-- Per ready list: it holds no leftover, so a new entry needs no look for marks. Read once,
-- with the first task's record (a batch saves a call per task, a single enqueue a call):
-- every push below comes after its task's record was read.
local unmarked = nil
local function load_record(id)
  if unmarked then return load(KEYS[1], id) end
  local got = redis.call('HMGET', KEYS[1], id, '#high', '#normal', '#low')
  unmarked = {high = not got[2], normal = not got[3], low = not got[4]}
  return decode(got[1])
end

-- The registered idle executor takes the task at once: only when nothing waits before it
-- (ready lists and buffer empty), the queue is not paused and its running limit has room.
local function hand_over(id, meta, payload)
  -- a task with an expiry goes through the ready list: the executor's blocked read of the
  -- hand list may return late (its idle hooks run first), and only a fetch checks expiry
  if not registered or meta.exp or meta.key then return false end  -- keyed: fetch takes turns
  local w = fields(registered, 4)
  if tonumber(w[4]) <= now or redis.call('LLEN', KEYS[18]) > 0 or pending(ready, KEYS[1]) > 0
      or redis.call('LLEN', KEYS[12]) > 0 or redis.call('EXISTS', KEYS[14]) == 1 then
    return false
  end
  if cfg[3] and redis.call('ZCARD', KEYS[15]) >= tonumber(cfg[3]) then return false end
  if cfg[6] then return false end  -- tasks with their own rate limit: fetch.lua checks them
  if rate_t then
    local avail, tat = rate_tokens(KEYS[19], rate_t, rate_tau, now)
    if avail == 0 then return false end
    rate_take(KEYS[19], tat, rate_t, 1, now)
  end
  redis.call('DEL', KEYS[17])
  registered = nil
  lease_to(meta, redis.call('INCR', KEYS[16]), w[1], w[2], now)
  save(KEYS[1], id, meta, payload)
  redis.call('ZADD', KEYS[15], now + tonumber(w[3]), id)
  redis.call('RPUSH', KEYS[18], table.concat({w[1], w[2], meta.fence, meta.failures or 0, id,
    payload}, '\t'))
  return true
end

-- Buffered tasks enter first (FIFO): while the buffer holds any, a new one joins it.
if limit and when_full == 'buffer' and redis.call('LLEN', KEYS[12]) > 0 then
  room_made({tasks = KEYS[1], ready = ready, overflow = KEYS[12], wake = KEYS[8]},
    limit, when_full, 0, 1000)
end

-- (a stale copy of the task, in a ready list or the buffer, about to leave: not counted)
local function full(stale_ready, stale_buffered)
  if not limit then return false end
  waiting = waiting or pending(ready, KEYS[1], true)
  return waiting - stale_ready >= limit
    or (when_full == 'buffer' and buffered(KEYS[1], KEYS[12]) - stale_buffered > 0)
end

local function readied()
  if waiting then waiting = waiting + 1 end
end

local function enqueue(id, payload, prio, delay, first, cron_name, cron_tick, expires,
    batch)
  local keyed = nil  -- a keyed task (_keyed.lua): its key and limits ride in the priority
  if #prio > 6 then prio, keyed = KEYED.parse(prio) end
  if cron_name ~= '' then
    local last = tonumber(redis.call('HGET', KEYS[9], cron_name) or '-1')
    if last >= tonumber(cron_tick) then return 'skipped' end
    redis.call('HSET', KEYS[9], cron_name, cron_tick)
  end

  local meta = load_record(id)
  local stale = false  -- waiting, but its expiry passed before a fetch met it: replaced
  if meta then
    local state = meta.state
    local waits = state == 'queued' or state == 'delayed' or state == 'overflow'
    stale = waits and expired(meta, now)
    if waits and not stale then
      if not first then return 'exists' end
      -- the old entry stays where it is, marked as a leftover (no LREM: see _lib.lua)
      if state == 'queued' then
        leave(KEYS[1], level_of(meta.prio), id, meta)
        unmarked[level_of(meta.prio)] = false
      elseif state == 'overflow' then
        leave(KEYS[1], 'overflow', id, meta)
        readied()
      else
        redis.call('ZREM', KEYS[5], id)
        meta.due, meta.held = nil, nil  -- a held one reserves a token anew (no early start)
        readied()
      end
      meta.state, meta.prio = 'queued', prio
      push_ready(KEYS[1], ready, id, meta, payload, true, unmarked[level_of(prio)])
      woken = woken + 1
      return 'moved'
    elseif state == 'running' then
      meta.rerun = 1
      save(KEYS[1], id, meta, payload)
      return 'rerun'
    end
  end
  local limited = delay <= 0 and not first
    and full(stale and meta.state == 'queued' and 1 or 0, stale and meta.state == 'overflow' and 1 or 0)
  if limited and when_full ~= 'buffer' then  -- refused before anything is written
    redis.call('HINCRBY', KEYS[13], 'refused', 1)
    return 'full'
  end
  if stale then
    -- it would never run: its entry stays as a leftover and the new call takes its place
    -- (not counted as expired: no fetch met it)
    if meta.state == 'queued' then
      leave(KEYS[1], level_of(meta.prio), id, meta)
      unmarked[level_of(meta.prio)] = false
      if waiting then waiting = waiting - 1 end
      if limit and when_full == 'buffer' then  -- the room it leaves: buffered tasks first
        room_made({tasks = KEYS[1], ready = ready, overflow = KEYS[12], wake = KEYS[8]},
          limit, when_full, 0, 1000)
        waiting = nil
      end
    elseif meta.state == 'overflow' then
      leave(KEYS[1], 'overflow', id, meta)
    else
      redis.call('ZREM', KEYS[5], id)
    end
  elseif meta then
    -- error, done or expired: the new enqueue replaces the finished record (an enqueue acts
    -- as a redo)
    local at = meta.state == 'error' and redis.call('ZSCORE', KEYS[6], id)
    if at then err_leave(KEYS[1], KEYS[6], id, meta, at) end
    redis.call('ZREM', KEYS[6], id)
    redis.call('ZREM', KEYS[7], id)
  end

  meta = {state = 'queued', enqueued = now}
  if prio ~= 'normal' then meta.prio = prio end
  if expires > 0 then meta.exp = now + expires end
  if batch ~= '' then meta.batch = batch end
  if keyed then KEYED.mark(meta, keyed) end
  if delay > 0 then
    meta.state, meta.due = 'delayed', now + delay
    save(KEYS[1], id, meta, payload)
    redis.call('ZADD', KEYS[5], now + delay, id)
    scheduled = scheduled + 1  -- a scheduler may have to wake up sooner than it planned
    return 'added'
  end
  if limited then
    meta.state = 'overflow'
    push_entry(KEYS[1], KEYS[12], 'overflow', id, meta, payload, false)
    redis.call('HINCRBY', KEYS[13], 'overflowed', 1)
    return 'overflow'
  end
  if hand_over(id, meta, payload) then return 'added' end
  readied()
  push_ready(KEYS[1], ready, id, meta, payload, first, unmarked[level_of(meta.prio)])
  woken = woken + 1
  return 'added'
end

local out = {}
if KEYS[21] and redis.call('EXISTS', KEYS[21]) == 1 then return {ARGV[1], 'once'} end
local outcomes, written = {}, false
for i = 1, last, 9 do
  local id = ARGV[i]
  local outcome = enqueue(id, ARGV[i + 1], ARGV[i + 2], tonumber(ARGV[i + 3]),
    ARGV[i + 4] == '1', ARGV[i + 5], ARGV[i + 6], tonumber(ARGV[i + 7]), ARGV[i + 8])
  out[#out + 1] = id
  out[#out + 1] = outcome
  outcomes[#outcomes + 1] = ENQUEUED_CODE[outcome]
  written = written or outcome ~= 'full'
end
-- the answer is kept unless nothing was written (every task met a full queue: the client
-- waits for room and sends the same request again, which must be tried again)
if req and written then  -- PXAT: Redis propagates it as given (PX is rewritten each time)
  redis.call('SET', req, table.concat(outcomes), 'PXAT', now + tonumber(ARGV[last + 1]))
end
-- the once-guard is set only when the call was written (a full queue refused it: it is
-- sent again later)
if KEYS[21] and out[2] ~= 'full' then redis.call('SET', KEYS[21], '1', 'PX', ARGV[#ARGV]) end
if woken > 0 and not (rate_t and rate_sleeper(KEYS[19], now)) then wake(KEYS[8], woken) end
if scheduled > 0 then wake(KEYS[10], scheduled) end
return out
