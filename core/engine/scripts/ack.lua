-- Finish tasks that ran to success, in one call for a batch.
-- KEYS (shared with fail.lua): 1 tasks, 2 running, 3 done (id -> expiry ms), 4 errors,
--       5 delayed, 6 history, 7 stats (this minute), 8 ready:high, 9 ready:normal,
--       10 ready:low, 11 wake, 12 schedule, 13 stats (these 5 minutes), 14 stats (totals),
--       15 config, 16 batch_out (the ends of batch members, docs/batches.md)
-- ARGV: 1 worker id, 2 result ttl ms (0 = drop the record now; 'c<ms>': keep a compact
--       record, the `compact_finished` setting: _lib.lua keep_compact), 3 history maxlen,
--       then per task 4 fields: id, fencing token, task name, result JSON ('' = none)
-- Returns: the ids whose ack was refused: the run lost its lease (reaped, handed on). An ack
--          of a run that already ended this way (the same ack sent again: its first reply
--          was lost) is not refused and changes nothing, nor is an ack of a record that is
--          gone (finished and dropped or expired, deleted): docs/design.md, "Lost replies".
--          When a batch member ended here, the last element is '#batch' (no id has a '#'):
--          the worker relays the queue's batch_out then.
local ready = {high = KEYS[8], normal = KEYS[9], low = KEYS[10]}
local worker, maxlen = ARGV[1], ARGV[3]
local compact = string.sub(ARGV[2], 1, 1) == 'c'
local ttl = tonumber(compact and string.sub(ARGV[2], 2) or ARGV[2])
local now = now_ms()
local refused = {}
local stats = {}
local ended_members = false
local compacted = 0  -- records kept compact: a full Redis (OOM, _lib.lua keep_compact)
for i = 4, #ARGV, 4 do
  local id, token, name, result = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local meta, payload = load(KEYS[1], id)
  if not holds(meta, token, worker) then
    if meta and not settled_by(meta, token) then refused[#refused + 1] = id end
  else
    redis.call('ZREM', KEYS[2], id)
    local started = meta.started or now
    if not OOM then  -- a full Redis: history yields (_lib.lua, keep_compact)
      redis.call('XADD', KEYS[6], 'MAXLEN', '~', maxlen, '*', 'id', id, 'task', name,
        'status', 'done', 'worker', worker, 'thread', meta.thread or '',
        'enqueued', meta.enqueued or 0, 'started', started, 'ended', now,
        'runtime_ms', now - started, 'summary', '', 'comment', meta.comment or '')
    end
    stats.done = (stats.done or 0) + 1
    count_run(stats, meta, now)
    local rerun = meta.rerun
    if meta.batch and not rerun then  -- a rerun is not an end: the task runs once more
      member_end(KEYS[16], meta.batch, id, 'done', token, result)
      ended_members = true
    end
    clear_run(meta, KEYS[1])
    meta.ended = now
    settle(meta, token, 'done')
    if rerun then
      meta.state, meta.enqueued = 'queued', now
      new_series(meta)
      push_ready(KEYS[1], ready, id, meta, payload, false)
      wake(KEYS[11])
    else
      meta.state = 'done'
      if OOM or compact then
        keep_compact(KEYS[1], KEYS[3], id, meta, name, ttl, now, OOM)
        if OOM then compacted = compacted + 1 end
      else
        if result ~= '' then meta.result = result end
        keep_finished(KEYS[1], KEYS[3], id, meta, payload, ttl, now)
      end
    end
  end
end
if stats.done then
  save_stats(stats, KEYS[7], KEYS[13], KEYS[14])
  slot_freed(KEYS[15], KEYS[11], ready)
end
sweep_finished(KEYS[1], KEYS[3], now, 20)  -- a few finished records on the way
if OOM then
  if compacted > 0 then redis.call('HINCRBY', KEYS[14], 'oom_compact', compacted) end
  yield_finished(KEYS[1], KEYS[3], KEYS[14], 20)
end
if ended_members then refused[#refused + 1] = '#batch' end
return refused
