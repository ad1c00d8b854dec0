-- A run failed: schedule a retry, or move the task to the queue's error list.
-- KEYS (shared with ack.lua): 1 tasks, 2 running, 3 done, 4 errors, 5 delayed, 6 history,
--       7 stats (this minute), 8 ready:high, 9 ready:normal, 10 ready:low, 11 wake,
--       12 schedule, 13 stats (these 5 minutes), 14 stats (totals), 15 config,
--       16 batch_out (the ends of batch members: entering the error list is one)
-- ARGV: 1 worker id, 2 id, 3 fencing token, 4 task name, 5 error "Type: message",
--       6 traceback, 7 retry delay ms (-1 = no retry: to the error list), 8 history maxlen
-- Returns: 'error', 'retry', 'rerun' (an identical enqueue arrived meanwhile: queued again)
--          or 'refused' (lease lost to another run; nothing changed). The same failure sent
--          again (its first reply lost) gets the first one's answer and changes nothing; a
--          failure of a record that is gone: 'gone' (docs/design.md, "Lost replies").
local ready = {high = KEYS[8], normal = KEYS[9], low = KEYS[10]}
local worker, id, token, name = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local err, tb, retry, maxlen = ARGV[5], ARGV[6], tonumber(ARGV[7]), ARGV[8]
-- the first `n` bytes of `s` without cutting a UTF-8 character in two: readers decode the
-- history as UTF-8, and half a character made every read of the stream fail
local function utf8_head(s, n)
  if #s <= n then return s end
  local cut = n + 1  -- the first byte left out; step back while it continues a character
  while cut > 1 and string.byte(s, cut) >= 0x80 and string.byte(s, cut) < 0xC0 do
    cut = cut - 1
  end
  return string.sub(s, 1, cut - 1)
end
local meta, payload = load(KEYS[1], id)
if not holds(meta, token, worker) then
  if not meta then return 'gone' end
  return settled_by(meta, token) or 'refused'
end
local now = now_ms()
local started = meta.started or now
redis.call('ZREM', KEYS[2], id)
if OOM then  -- a full Redis: history and the traceback yield (_lib.lua, keep_compact)
  err, tb = utf8_head(err, 200), ''
  redis.call('HINCRBY', KEYS[14], 'oom_compact', 1)
  yield_finished(KEYS[1], KEYS[3], KEYS[14], 20)
else
  redis.call('XADD', KEYS[6], 'MAXLEN', '~', maxlen, '*', 'id', id, 'task', name,
    'status', retry >= 0 and 'retry' or 'failed', 'worker', worker, 'thread', meta.thread or '',
    'enqueued', meta.enqueued or 0, 'started', started, 'ended', now,
    'runtime_ms', now - started, 'summary', utf8_head(err, 200),
    'comment', meta.comment or '')
end
local stats = {failed = 1}
count_run(stats, meta, now)
save_stats(stats, KEYS[7], KEYS[13], KEYS[14])
slot_freed(KEYS[15], KEYS[11], ready)
meta.error, meta.traceback, meta.ended = err, tb, now
meta.failed_worker, meta.failed_thread = worker, meta.thread
local rerun = meta.rerun
clear_run(meta, KEYS[1])
if rerun then
  meta.state, meta.enqueued = 'queued', now
  new_series(meta)
  settle(meta, token, 'rerun')
  push_ready(KEYS[1], ready, id, meta, payload, false)
  wake(KEYS[11])
  return 'rerun'
end
meta.failures = (meta.failures or 0) + 1  -- what `retries` limits (lost leases do not count)
if retry >= 0 then
  settle(meta, token, 'retry')
  meta.state, meta.due = 'delayed', now + retry
  save(KEYS[1], id, meta, payload)
  redis.call('ZADD', KEYS[5], now + retry, id)
  wake(KEYS[12])
  return 'retry'
end
settle(meta, token, 'error')
if meta.batch then member_end(KEYS[16], meta.batch, id, 'failed', token, '') end
meta.state, meta.failed = 'error', now
err_enter(KEYS[1], KEYS[4], id, meta, now, true)  -- the exact counters (_lib.lua)
save(KEYS[1], id, meta, payload)
redis.call('ZADD', KEYS[4], now, id)
return 'error'
