-- Helpers prepended to every script when it is loaded (see ztq/core/storage.py).
--
-- A task record is one field of the queue's `tasks` hash: a line of meta JSON (state, times,
-- attempts, error ...) that scripts decode and rewrite, then '\n', then the payload JSON
-- (task name, args, kwargs, options) that scripts never decode, so numbers and empty
-- containers in arguments pass through Lua untouched. The meta of a task that waits as it
-- was enqueued ({state = 'queued', enqueued = ms}, nothing else) is the bare time: most
-- records of a long queue are such, and JSON keys were about half of each.

-- The layout of the stored data these scripts write (docs/design.md, "Layout versions"):
-- a record saved in its JSON form carries it as `v`. A record without `v` was written by a
-- release before layout 2 (or waits in the bare form, which every layout reads alike).
local LAYOUT = 2

-- Keyed tasks: their functions live in _keyed.lua (appended after this file), as fields of
-- this table, so that the plain path's functions below branch into them with one test.
local KEYED = {}

-- An enqueue's outcomes as kept for its request id (enqueue.lua): one digit per task, so
-- that a single task's answer ('1') is one of Redis's shared integers (nothing allocated).
-- Here, so that a function library builds them once, not on every call.
local ENQUEUED = {'added', 'exists', 'moved', 'rerun', 'skipped', 'full', 'overflow'}
local ENQUEUED_CODE = {added = '1', exists = '2', moved = '3', rerun = '4', skipped = '5',
  full = '6', overflow = '7'}

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- A stored record (a field's value; false or nil: no record) as (meta, payload).
local function decode(raw)
  if not raw then return nil, nil end
  local nl = string.find(raw, '\n', 1, true)
  if not nl then return {state = 'error', error = 'PayloadError: record has no meta line'}, raw end
  local head = string.sub(raw, 1, nl - 1)
  if string.find(head, '^%d+$') then
    return {state = 'queued', enqueued = tonumber(head)}, string.sub(raw, nl + 1)
  end
  local ok, meta = pcall(cjson.decode, head)
  if not ok or type(meta) ~= 'table' then
    meta = {state = 'error', error = 'PayloadError: meta line is not JSON'}
  end
  return meta, string.sub(raw, nl + 1)
end

local function load(tasks, id)
  return decode(redis.call('HGET', tasks, id))
end

-- {state = 'queued', enqueued = <ms>} and no other field: stored as the bare time
local function as_enqueued(meta)
  local t = meta.enqueued
  if meta.state ~= 'queued' or type(t) ~= 'number' or t < 0 or t >= 2^53 or t % 1 ~= 0 then
    return false  -- only an exact whole number reads back the same
  end
  local n = 0
  for _ in pairs(meta) do
    n = n + 1
    if n > 2 then return false end
  end
  return true
end

local function save(tasks, id, meta, payload)
  meta.v = nil  -- not a field that keeps a record out of the bare form
  local head
  if as_enqueued(meta) then
    head = string.format('%d', meta.enqueued)
  else
    meta.v = LAYOUT
    head = cjson.encode(meta)
  end
  redis.call('HSET', tasks, id, head .. '\n' .. payload)
end

-- Expiry (docs/queue-controls.md, "Expiry"): a task enqueued with `expires` keeps its
-- absolute expiry `exp` (ms on Redis's clock) in its meta, and is leased no more once it
-- passed: fetch ends it as `expired` instead (history, stats, the `done` zset).
local function expired(meta, now)
  local exp = meta and meta.exp
  return type(exp) == 'number' and exp <= now
end

-- ready lists come as a table {high=KEY, normal=KEY, low=KEY}
local function ready_list(ready, prio)
  return ready[prio] or ready['normal']
end

-- n tokens (1 if not given), as long as the list holds fewer than 16: enough to wake every
-- idle executor that matters, bounded when none is
local function wake(key, n)
  for _ = 1, math.min(n or 1, 16 - redis.call('LLEN', key)) do redis.call('LPUSH', key, '1') end
end

-- A run of a queue with a running limit (`max_running` in its config) ended: a slot is free.
-- A fetch that found the queue full returned nothing and its thread sleeps on the wake list,
-- so wake one idle worker if tasks are waiting.
local function slot_freed(config, wake_key, ready)
  if redis.call('HEXISTS', config, 'max_running') == 0 then return end
  for _, level in ipairs({'high', 'normal', 'low'}) do
    if redis.call('LLEN', ready[level]) > 0 then wake(wake_key); return end
  end
end

-- A lease: the record of a task handed to (worker, thread) with the fencing token `token`
-- (fetch, and an enqueue that hands a task to the queue's waiting executor).
local function lease_to(meta, token, worker, thread, now)
  -- a task a task rate limit held (fetch.lua) starts: its wait counts from its enqueue
  if meta.held then meta.held, meta.due = nil, nil end
  meta.state = 'running'
  meta.fence = string.format('%d', token)
  meta.attempts = (meta.attempts or 0) + 1
  meta.started = now
  meta.worker, meta.thread = worker, thread
end

-- The fields of a tab-separated string, at most n (the last one takes the rest).
local function fields(text, n)
  local out, start = {}, 1
  while #out < n - 1 do
    local tab = string.find(text, '\t', start, true)
    if not tab then break end
    out[#out + 1] = string.sub(text, start, tab - 1)
    start = tab + 1
  end
  out[#out + 1] = string.sub(text, start)
  return out
end

-- Leftovers (docs/design.md, "Deleting a waiting task"). Deleting a queued or buffered
-- task, or moving it to the head (`first`), leaves its entry where it is in its list
-- (taking it out would be an LREM: a scan of the whole list) and marks it as a leftover in
-- the queue's tasks hash, under fields no task id can spell ('#' is not allowed in one):
-- `#<list>:<entry>` marks the entry, `#<list>` counts the list's marks (<list>: high,
-- normal, low, overflow). A fetch or a purge that pops a marked entry drops it and its
-- mark. An id pushed to a list where a leftover of it still waits gets the entry
-- `<id>#<n>` (the first n not marked there; the record keeps it as `entry`), so an entry
-- is a leftover exactly when it is marked: the live entry keeps its place (FIFO exact) and
-- a list holds LLEN - `#<list>` tasks (counts exact).
local function level_of(prio)
  if prio == 'high' or prio == 'low' then return prio end
  return 'normal'
end

-- The entry to push for `id` into `list`; the record (`meta`, saved by the caller) keeps it
-- when it is not the id itself. `unmarked`: the caller knows the list holds no leftover
-- (its `#<list>` count is absent), so no mark is looked for.
local function entry_for(tasks, list, id, meta, unmarked)
  local entry, n = id, 0
  while not unmarked and redis.call('HEXISTS', tasks, '#' .. list .. ':' .. entry) == 1 do
    n = n + 1
    entry = id .. '#' .. n
  end
  meta.entry = n > 0 and entry or nil
  return entry
end

-- Save a record and push its entry to the head or the tail of a list.
local function push_entry(tasks, key, list, id, meta, payload, head, unmarked)
  local entry = entry_for(tasks, list, id, meta, unmarked)
  save(tasks, id, meta, payload)
  redis.call(head and 'LPUSH' or 'RPUSH', key, entry)
end

-- ... of the ready list of its priority (ready: {high=KEY, normal=KEY, low=KEY})
local function push_ready(tasks, ready, id, meta, payload, head, unmarked)
  if meta.key then return KEYED.push(tasks, id, meta, payload, head) end
  local level = level_of(meta.prio)
  push_entry(tasks, ready[level], level, id, meta, payload, head, unmarked)
end

-- The task left `list` (deleted, moved) with its entry still in it: mark the entry.
local function leave(tasks, list, id, meta)
  if meta.key and meta.state == 'queued' then return KEYED.leave(tasks, meta) end
  redis.call('HSET', tasks, '#' .. list .. ':' .. (meta.entry or id), '1')
  redis.call('HINCRBY', tasks, '#' .. list, 1)
  meta.entry = nil
end

-- An entry popped off the head of `list`: the task it stands for (id, meta, payload) when
-- it is live, that is its record is in state `want` in this list and the entry is its own;
-- else nil (a leftover: its mark is dropped). `marked`: the list may hold leftovers (its
-- `#<list>` count was read), else no mark is looked for.
local function popped(tasks, list, entry, want, marked)
  if marked and redis.call('HDEL', tasks, '#' .. list .. ':' .. entry) == 1 then
    if redis.call('HINCRBY', tasks, '#' .. list, -1) <= 0 then
      redis.call('HDEL', tasks, '#' .. list)
    end
    return nil
  end
  local hash = string.find(entry, '#', 1, true)
  local id = hash and string.sub(entry, 1, hash - 1) or entry
  local meta, payload = load(tasks, id)
  if meta and meta.state == want and (meta.entry or id) == entry
      and (want == 'overflow' or level_of(meta.prio) == list) then
    meta.entry = nil
    return id, meta, payload
  end
  return nil  -- an entry no mark accounts for (a record gone by other means): dropped
end

-- The tasks waiting in a queue's ready lists: what a queue's `max_pending` bounds. Without
-- `tasks` the leftovers are counted too (an upper bound). `keyed`: with the tasks waiting in
-- keyed lists (_keyed.lua), as a limit counts them.
local function pending(ready, tasks, keyed)
  local n = redis.call('LLEN', ready.high) + redis.call('LLEN', ready.normal)
    + redis.call('LLEN', ready.low)
  if tasks and n > 0 then  -- empty lists hold no leftover either
    local left = redis.call('HMGET', tasks, '#high', '#normal', '#low')
    n = n - (tonumber(left[1]) or 0) - (tonumber(left[2]) or 0) - (tonumber(left[3]) or 0)
  end
  if keyed and tasks then n = n + (tonumber(redis.call('HGET', tasks, '#keyed')) or 0) end
  return n
end

-- The tasks in a queue's overflow buffer, leftovers not counted.
local function buffered(tasks, overflow)
  return redis.call('LLEN', overflow) - (tonumber(redis.call('HGET', tasks, '#overflow')) or 0)
end

-- Room may have been made in a queue with a `max_pending` (a fetch took tasks, a delete or a
-- purge removed some, the limit was raised or lifted): move tasks from its overflow buffer
-- into the ready lists while there is room (oldest first, at most `most`), waking an idle
-- worker for them; then, when the queue was full before (`made` tasks ago) and has room now,
-- wake producers blocked on it (`when_full = block`; the tokens are hints, <= 16, that
-- expire in 2 s: a producer that blocks later does not spin on old ones).
-- q: {tasks=, ready={...}, overflow=, room=, wake=}; limit: max_pending (nil: none).
-- Returns how many tasks moved.
local function room_made(q, limit, when_full, made, most)
  local waiting = pending(q.ready, q.tasks, true)
  local free = limit and (limit - waiting) or most
  local moved = 0
  local marked = free > 0 and redis.call('HEXISTS', q.tasks, '#overflow') == 1
  while moved < math.min(free, most) do
    local entry = redis.call('LPOP', q.overflow)
    if not entry then break end
    local id, meta, payload = popped(q.tasks, 'overflow', entry, 'overflow', marked)
    if id then  -- anything else is a leftover: dropped
      meta.state = 'queued'
      push_ready(q.tasks, q.ready, id, meta, payload, false)
      moved = moved + 1
    end
  end
  if moved > 0 then wake(q.wake) end
  if when_full == 'block' and limit and free > moved and waiting + made >= limit then
    wake(q.room, free - moved)
    redis.call('PEXPIRE', q.room, 2000)
  end
  return moved
end

-- The one ownership check of a run: does the run presenting (token, worker) hold the task's
-- live lease? `fence` is set by fetch from the queue's lease counter, which only ever grows,
-- so the token of an earlier lease never matches again whatever happened since (reap, retry,
-- redo, rerun, delete and enqueue again). Every write of a run (ack, fail, renew, progress,
-- release) goes through here. Tokens are kept as decimal strings: cjson writes numbers with
-- 14 significant digits, which would merge tokens from 1e14 on.
-- A record leased by a release of 24 Nov 2026 (8563e7f to a798050) keeps its token as a
-- JSON number: read as the same decimal string.
local function holds(meta, token, worker)
  if meta == nil or meta.state ~= 'running' or meta.worker ~= worker then return false end
  local fence = meta.fence
  if type(fence) == 'number' then fence = string.format('%d', fence) end
  return fence ~= nil and fence == token
end

-- Lost replies (docs/design.md, "Lost replies"): a run's end (ack, fail) is kept on the
-- record as `settled` = '<token> <outcome>' (outcome: done, error, retry, rerun), so that
-- the same call sent again, its first reply lost to a timeout or a reset connection, is
-- answered as the first one was instead of refused. It stays until the next run of the task
-- ends (a worker that re-sends its acks after a long outage is answered too), and an
-- enqueue that replaces the record drops it.
local function settle(meta, token, outcome)
  meta.settled = token .. ' ' .. outcome
end

-- The outcome of the run presenting `token` when it already ended (see settle), else nil.
local function settled_by(meta, token)
  local s = meta and meta.settled
  if type(s) ~= 'string' or string.sub(s, 1, #token + 1) ~= token .. ' ' then return nil end
  return string.sub(s, #token + 2)
end

-- A new series of runs (redo, or an identical enqueue that arrived during a run): the counts
-- that `retries` (failures) and `max_lost` (lost) limit, and the runs shown, start again.
-- `fence` is not touched: tokens never go back.
-- (a rerun, a redo: the expiry of the call that made the record is not the new series')
local function new_series(meta)
  meta.attempts, meta.failures, meta.lost, meta.exp = nil, nil, nil, nil
end

-- A run ended (acked, failed, reaped, released): nothing of it stays on the record, the
-- rerun request included (ack and fail read it first: it asks for one more run after this one)
local function clear_run(meta, tasks)
  if meta.ks then KEYED.release(tasks, meta) end  -- a slot of its key (_keyed.lua)
  meta.rerun = nil
  meta.worker = nil
  meta.thread = nil
  meta.progress = nil
  meta.comment = nil
  meta.pid = nil
end

-- Finished runs are counted into three stats hashes of the queue (ack.lua and fail.lua, as
-- KEYS 7, 13 and 14): this minute's (kept 2 h), this 5 minutes' (kept 25 h) and the totals
-- (kept for good, for Prometheus). Fields: done, failed, and per run its waiting time
-- (ready -> leased) and run time (leased -> finished) as histograms: w<b> and r<b> count
-- the times t (ms) with 2^((b-1)/2) < t <= 2^(b/2) (b = 0 for t <= 1 ms, 48 beyond 4.7 h),
-- wsum and rsum their sums. core/monitor/timings.py reads them. One HINCRBY per field and hash per
-- batch, so a busy worker pays a few calls per batch, not per task.
local function time_bucket(ms)
  if ms <= 1 then return 0 end
  return math.min(48, math.ceil(2 * math.log(ms) / math.log(2) - 1e-9))
end

local function count_run(stats, meta, now)
  local started = meta.started or now
  local ready_at = math.max(meta.enqueued or started, meta.due or 0)
  local wait, run = math.max(0, started - ready_at), math.max(0, now - started)
  local w, r = 'w' .. time_bucket(wait), 'r' .. time_bucket(run)
  stats[w] = (stats[w] or 0) + 1
  stats[r] = (stats[r] or 0) + 1
  stats.wsum = (stats.wsum or 0) + wait
  stats.rsum = (stats.rsum or 0) + run
end

local function save_stats(stats, minute, five, total)
  for field, n in pairs(stats) do
    redis.call('HINCRBY', minute, field, n)
    redis.call('HINCRBY', five, field, n)
    redis.call('HINCRBY', total, field, n)
  end
  redis.call('PEXPIRE', minute, 7200000)
  redis.call('PEXPIRE', five, 90000000)
end

-- Exact error counters (docs/console.md, "Exact counts"). Every script that moves a task
-- into or out of a queue's error list moves them in the same call, so a page reads the
-- count of a group in O(groups) at any size. They live in the queue's tasks hash under
-- fields no task id can spell ('#'):
--   `#eg:<g>` tasks in error group g (error type, top frame, what happened: the console's
--   group); `#ek:<k>` tasks of error kind k (error type and what happened, across frames);
--   `#ega:<g>` / `#eka:<k>` of them, tasks an operator had redone (they failed again);
--   `#egi:<g>` / `#eki:<k>` what the group is (JSON: type t, frame f, kind k, the newest
--   message m, failed at, its id); `#egs` / `#eks` the live keys, space-separated;
--   `#eb` '1' once the counters hold the whole list (a queue whose list was empty when it
--   first failed is born so); while the one-time rebuild of a list written before them
--   runs (count_errors.lua), the position '<score> <id>' it reached: a move counts only
--   for an entry at or before it (the rebuild counts the rest).
-- The keys are 12 hex digits of two polynomial hashes of the bytes (err_hash: plain
-- arithmetic, the same on every Redis and its in-memory twin, which has no sha1hex);
-- groups.py computes the same ones for a record that predates them; a record keeps its
-- own as `eg` / `ek`.
local function err_trim(s)
  return (string.gsub(string.gsub(s, '^[ \t\r\n\v\f]+', ''), '[ \t\r\n\v\f]+$', ''))
end

-- The first n bytes of s, not cutting a UTF-8 character in two (readers decode as UTF-8)
local function err_cut(s, n)
  if #s <= n then return s end
  local cut = n + 1
  while cut > 1 and string.byte(s, cut) >= 0x80 and string.byte(s, cut) < 0xC0 do
    cut = cut - 1
  end
  return string.sub(s, 1, cut - 1)
end

-- The newest message of a group, as the pages show it
local function err_message(err)
  return err_cut(err, 300)
end

local function err_kind(err)
  local head = err_trim(string.match(err, '^[^:]*'))
  if #head <= 200 and string.find(head, '^[A-Za-z_][A-Za-z0-9_.]*$') then return head end
  head = err_cut(head, 60)
  return head ~= '' and head or '?'
end

local function err_frame(tb)
  local found = ''
  for line in string.gmatch(tb, '[^\n]+') do
    local path, n, fn = string.match(line, '^[ \t\r\n\v\f]*File "([^"]*)", line (%d+), in (.+)$')
    if path then
      path = string.gsub(path, '\\', '/')
      path = string.match(path, '([^/]*/[^/]*)$') or path
      found = path .. ':' .. n .. ' in ' .. err_trim(fn)
    end
  end
  return found
end

local function err_hash(s)
  local a, b = 0, 0
  for i = 1, #s do
    local c = string.byte(s, i)
    a = (a * 257 + c) % 16777213
    b = (b * 263 + c) % 16777199
  end
  return string.format('%06x%06x', a, b)
end

-- (group key, kind key, info) of a failed record
local function err_keys(meta, parts)
  local err, tb = tostring(meta.error or ''), tostring(meta.traceback or '')
  if meta.eg and meta.ek and not parts then return meta.eg, meta.ek, nil end
  local kind = err_kind(err)
  local etype = (err ~= '' and tb == '') and 'unknown' or kind
  local frame = err_frame(tb)
  local g = err_hash(etype .. '\0' .. frame .. '\0' .. kind)
  local k = err_hash('k\0' .. etype .. '\0' .. kind)
  return meta.eg or g, meta.ek or k, {etype, frame, kind}
end

-- Does a move of the entry (score, id) count? (see `#eb` above)
local function err_counted(tasks, errors, id, score, entering)
  local mark = redis.call('HGET', tasks, '#eb')
  if mark == '1' then return true end
  if not mark then  -- never counted: a rebuild will count it, unless the list is empty
    if not entering or redis.call('ZCARD', errors) > 0 then return false end
    redis.call('HSET', tasks, '#eb', '1')
    return true
  end
  if not score then return false end
  local at, last = string.match(mark, '^(%S+) (.*)$')
  at, score = tonumber(at), tonumber(score)
  return score < at or (score == at and id <= last)
end

local function err_list(tasks, field, key, add)
  local list = redis.call('HGET', tasks, field) or ''
  if add then
    redis.call('HSET', tasks, field, list == '' and key or (list .. ' ' .. key))
  else
    list = err_trim(string.gsub(' ' .. list .. ' ', ' ' .. key .. ' ', ' ', 1))
    if list == '' then redis.call('HDEL', tasks, field) else redis.call('HSET', tasks, field, list) end
  end
end

local function err_bump(tasks, kind, key, by, info, always, again)
  local n = redis.call('HINCRBY', tasks, '#e' .. kind .. ':' .. key, by)
  if again and n > 0 then
    if redis.call('HINCRBY', tasks, '#e' .. kind .. 'a:' .. key, by) <= 0 then
      redis.call('HDEL', tasks, '#e' .. kind .. 'a:' .. key)
    end
  end
  if n <= 0 then
    redis.call('HDEL', tasks, '#e' .. kind .. ':' .. key, '#e' .. kind .. 'i:' .. key,
      '#e' .. kind .. 'a:' .. key)
    err_list(tasks, '#e' .. kind .. 's', key, false)
    return
  end
  if n == by then err_list(tasks, '#e' .. kind .. 's', key, true) end
  if info and (always or n == by) then
    redis.call('HSET', tasks, '#e' .. kind .. 'i:' .. key, info)
  end
end


-- A record enters the error list at `score` (call it before the ZADD and before the record
-- is saved: the record keeps its keys). `newest`: a new failure (its message becomes the
-- group's example); a restored one names a group only when it is the first of it again.
local function err_enter(tasks, errors, id, meta, score, newest)
  local g, k, parts = err_keys(meta, true)
  meta.eg, meta.ek = g, k
  if not err_counted(tasks, errors, id, score, true) then return end
  local info = cjson.encode({t = parts[1], f = parts[2], k = parts[3],
    m = err_message(tostring(meta.error or '')), at = tonumber(score), id = id})
  local again = type(meta.redone) == 'number' and meta.redone > 0
  err_bump(tasks, 'g', g, 1, info, newest, again)
  err_bump(tasks, 'k', k, 1, info, false, again)  -- a kind's newest: its groups' (groups.py)
end

-- A record in the error list leaves it (call before the ZREM, for a record that is in it;
-- `score`: its score when the caller popped it already).
local function err_leave(tasks, errors, id, meta, score)
  if not meta then return end
  local g, k = err_keys(meta)
  meta.eg, meta.ek = nil, nil  -- a later failure is grouped anew
  if redis.call('HGET', tasks, '#eb') ~= '1' then  -- during a rebuild: by its position
    score = score or redis.call('ZSCORE', errors, id)
    if not score or not err_counted(tasks, errors, id, score) then return end
  end
  local again = type(meta.redone) == 'number' and meta.redone > 0
  err_bump(tasks, 'g', g, -1, nil, false, again)
  err_bump(tasks, 'k', k, -1, nil, false, again)
end

-- The ids a requeue-like move works on (requeue.lua, redo.lua): ARGV from `first` on, or in
-- mode 'oldest' the oldest `limit` entries of the `source` zset.
local function picked_ids(mode, source, limit, first)
  if mode == 'oldest' then return redis.call('ZRANGE', source, 0, limit - 1) end
  local ids = {}
  for i = first, #ARGV do ids[#ids + 1] = ARGV[i] end
  return ids
end

-- Put one failed ('error') or delayed task back at the tail of its ready list (redo / run
-- now). A redone error starts a new series of runs. Returns whether it moved, and the record
-- as read (nil: no record) for the caller's own bookkeeping.
local function requeue_one(tasks, source, ready, id, want, now)
  local meta, payload = load(tasks, id)
  if not (meta and meta.state == want and redis.call('ZSCORE', source, id)) then
    return false, meta
  end
  if want == 'error' then err_leave(tasks, source, id, meta) end
  redis.call('ZREM', source, id)
  meta.state, meta.due, meta.enqueued = 'queued', nil, now
  if want == 'error' then
    new_series(meta)
    meta.exp = nil  -- a redo is the operator's explicit act: it runs whatever its expiry
    meta.error, meta.traceback, meta.failed = nil, nil, nil
    meta.redone = (meta.redone or 0) + 1
  end
  push_ready(tasks, ready, id, meta, payload, false)
  return true, meta
end

-- A batch member ended (docs/batches.md): its end goes to its queue's outbox, written with
-- the move that ended it; the relay applies it to the batch (global slot) by its fence.
-- outcome: 'done' or 'failed'; result: the result JSON ('' = none).
local function member_end(outbox, batch, id, outcome, fence, result)
  if type(fence) == 'number' then fence = string.format('%d', fence) end
  local entry = batch .. '\t' .. id .. '\t' .. outcome .. '\t' .. (fence or '0')
  if result and result ~= '' then entry = entry .. '\t' .. result end
  redis.call('RPUSH', outbox, entry)
end

-- A finished record (done or expired) stays for its result TTL in the queue's `done` set
-- (0: dropped now); sweep_finished removes it once the TTL passed.
local function keep_finished(tasks, done, id, meta, payload, ttl, now)
  if ttl > 0 then
    save(tasks, id, meta, payload)
    redis.call('ZADD', done, now + ttl, id)
  else
    redis.call('HDEL', tasks, id)
  end
end

-- A full Redis (docs/design.md, "A full Redis"). Redis refuses a script that may write while
-- its used memory is over maxmemory (policy noeviction): the worker's fetch, ack, fail and
-- renew are then sent again as their allow-oom twins (scripts.py), which see OOM = true and
-- pay for what they write with what they free. Finished records and history yield first:
-- an ack keeps a compact record (what `ping` and a resent ack read: state, times, `settled`,
-- `fence`; not the arguments nor the result), a fail keeps its error line but not its
-- traceback, neither writes a history entry, and each drops up to 20 finished records ahead
-- of their result TTL, those due first (up to the first compact one: those are what the
-- episode kept, small, and go at their own TTL). The queue's totals count both (`oom_compact`,
-- `oom_dropped`: `ztq info`, metrics). A renewal only moves a score: never refused.
-- (`compact`: 2 for a record kept so under OOM, 1 for the `compact_finished` setting's)
local function keep_compact(tasks, done, id, meta, name, ttl, now, oom)
  if ttl <= 0 then
    redis.call('HDEL', tasks, id)
    return
  end
  local small = {state = meta.state, enqueued = meta.enqueued, started = meta.started,
    ended = meta.ended, settled = meta.settled, fence = meta.fence, compact = oom and 2 or 1}
  save(tasks, id, small, cjson.encode({name}):sub(1, -2) .. ',[]]')
  redis.call('ZADD', done, now + ttl, id)
end

local function yield_finished(tasks, done, totals, n)
  local old = redis.call('ZRANGE', done, 0, n - 1)
  local dropped = 0
  for _, id in ipairs(old) do
    local meta = load(tasks, id)
    if meta and meta.compact == 2 then break end  -- the rest came during the episode: kept
    if meta and (meta.state == 'done' or meta.state == 'expired') then
      redis.call('HDEL', tasks, id)
      dropped = dropped + 1
    end
    redis.call('ZREM', done, id)
  end
  if dropped > 0 then redis.call('HINCRBY', totals, 'oom_dropped', dropped) end
end

-- Finished records (done or expired) whose result TTL passed go, a few at a time (bounded
-- work per call): ack does it on the way, and so does fetch, which ends expired tasks
-- without an ack and so must not leave their records behind when nothing is acked.
local function sweep_finished(tasks, done, now, n)
  local old = redis.call('ZRANGEBYSCORE', done, '-inf', now, 'LIMIT', 0, n)
  for _, id in ipairs(old) do
    local meta = load(tasks, id)
    if meta and (meta.state == 'done' or meta.state == 'expired') then
      redis.call('HDEL', tasks, id)
    end
    redis.call('ZREM', done, id)
  end
end

-- Rate limits (docs/queue-controls.md, "Rate limits"): a queue's `rate_limit` ("N/s", "N/m"
-- or "N/h" in its config) and `rate_burst` (B >= 1, default 1) bound the leases it hands
-- out, counted on Redis's clock by GCRA (a token bucket kept as one number): `tat` in the
-- queue's `rate` hash is the theoretical arrival time of the next start; a start at `now`
-- conforms while tat - now <= (B - 1) x T, T = the period / N, and moves tat on by T. Over
-- any window of W ms at most W / T + B leases start (2 x N/s + B over 2 s). The same hash
-- holds the slot registration: `slot` (ms) and `who` (worker TAB thread), the one throttled
-- executor that sleeps until the next token (fetch.lua); every other idle executor sleeps on
-- the wake list until woken.
local RATE_UNITS = {s = 1000, m = 60000, h = 3600000}

-- T (ms per start) and the tolerance (ms) of a config's rate, or nil when it has none
local function rate_of(spec, burst)
  if not spec then return nil end
  local n, unit = string.match(spec, '^(%d+)/([smh])$')
  if not n or tonumber(n) < 1 then return nil end
  local t = RATE_UNITS[unit] / tonumber(n)
  local b = math.max(1, math.floor(tonumber(burst or '1') or 1))
  return t, (b - 1) * t
end

-- How many starts conform now, and the arrival time they count from
local function rate_tokens(key, t, tau, now)
  local tat = math.max(tonumber(redis.call('HGET', key, 'tat') or '0') or 0, now)
  return math.max(0, math.floor((now + tau - tat) / t) + 1), tat
end

-- The rate hash lives until 2 s after its latest arrival time (never shortened)
local function rate_keep(key, tat, now)
  local want = math.ceil(tat - now) + 2000
  if redis.call('PTTL', key) < want then redis.call('PEXPIRE', key, want) end
end

-- n starts were handed out at `now`
local function rate_take(key, tat, t, n, now)
  if n <= 0 then return end
  tat = tat + n * t
  redis.call('HSET', key, 'tat', string.format('%.17g', tat))
  rate_keep(key, tat, now)
end

-- Is an executor other than (worker, thread) registered for the next token, and still live
-- (its slot passed less than a second ago)?
local function rate_sleeper(key, now, worker, thread)
  local got = redis.call('HMGET', key, 'slot', 'who')
  local slot = tonumber(got[1])
  if not slot or slot + 1000 < now then return false end
  return got[2] ~= (worker or '') .. '\t' .. (thread or '')
end

-- A task's own rate limit (`@task(rate_limit=...)`: `rate:<task>` = 'N/u B' in the queue's
-- config, written by the workers that register the task; field `t:<task>` of the rate hash
-- is its arrival time). The task's name is the first field of its payload (read with a
-- string match, the payload is not decoded). Returns nil when the task may start now (its
-- token is taken), or the time (ms) of the token reserved for it: the caller holds it until
-- then. A held task (meta.held) owns its token already: promote.lua brings it back at the
-- token's time (an operator's "run now" sooner), and it starts if that time is less than
-- one period ago.
local function task_gate(config, key, meta, payload, now)
  local name = string.match(payload, '^%[%s*"([^"\\]+)"')
    or string.match(payload, '"task"%s*:%s*"([^"\\]+)"')
  if not name then return nil end
  local spec = redis.call('HGET', config, 'rate:' .. name)
  if not spec then return nil end
  local t, tau = rate_of(string.match(spec, '^(%S+)'), string.match(spec, ' (%d+)$'))
  if not t then return nil end
  if meta.held then
    -- its token was reserved for `due`: it starts within one period of it (lease_to clears
    -- the mark). Later (the queue was paused, every thread busy), the held tasks due
    -- meanwhile would start together, over the bound: it reserves a token anew.
    if not meta.due or now < meta.due + t then return nil end
    meta.held, meta.due = nil, nil
  end
  local field = 't:' .. name
  local tat = math.max(tonumber(redis.call('HGET', key, field) or '0') or 0, now)
  redis.call('HSET', key, field, string.format('%.17g', tat + t))
  rate_keep(key, tat + t, now)
  local at = tat - tau  -- when this start conforms
  if at <= now then return nil end
  return math.ceil(at)
end

