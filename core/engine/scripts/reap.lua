-- Hand back the tasks whose lease expired (their worker died or froze).
-- KEYS: 1 tasks, 2 running, 3 errors, 4 ready:high, 5 ready:normal, 6 ready:low, 7 wake,
--       8 config, 9 hand (a lease handed to an executor that never took it: dropped with it),
--       10 batch_out (a poison pill that is a batch member ended: failed, docs/batches.md)
-- ARGV: 1 max times a task may lose its worker before it is a poison pill, 2 max tasks
-- Returns: {{id, worker, outcome ('ready' or 'error'), ...}, next lease deadline ms or -1,
--          Redis time ms}: the reaped tasks for the event log, and when to look again.
local ready = {high = KEYS[4], normal = KEYS[5], low = KEYS[6]}
local max_lost, limit = tonumber(ARGV[1]), tonumber(ARGV[2])
local now = now_ms()
local out = {}
local back = 0
local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, limit)
local handed = #expired > 0 and redis.call('LRANGE', KEYS[9], 0, -1) or {}
for _, entry in ipairs(handed) do  -- at most a few: one per queue at a time
  local deadline = redis.call('ZSCORE', KEYS[2], fields(entry, 6)[5])
  if deadline and tonumber(deadline) <= now then redis.call('LREM', KEYS[9], 1, entry) end
end
for _, id in ipairs(expired) do
  redis.call('ZREM', KEYS[2], id)
  local meta, payload = load(KEYS[1], id)
  if meta and meta.state == 'running' then
    local worker = meta.worker or ''
    local token = meta.fence
    meta.lost = (meta.lost or 0) + 1
    clear_run(meta, KEYS[1])
    if meta.lost >= max_lost then
      meta.state, meta.failed, meta.ended = 'error', now, now
      meta.error = 'WorkerLost: the task lost its worker ' .. meta.lost ..
        ' times (last: ' .. worker .. '); kept out of the queue as a poison pill'
      err_enter(KEYS[1], KEYS[3], id, meta, now, true)  -- the exact counters (_lib.lua)
      redis.call('ZADD', KEYS[3], now, id)
      if meta.batch then member_end(KEYS[10], meta.batch, id, 'failed', token, '') end
      out[#out + 1], out[#out + 2], out[#out + 3] = id, worker, 'error'
    else
      meta.state = 'queued'
      push_ready(KEYS[1], ready, id, meta, payload, true)
      back = back + 1
      out[#out + 1], out[#out + 2], out[#out + 3] = id, worker, 'ready'
    end
    if meta.state == 'error' then save(KEYS[1], id, meta, payload) end
  end
end
-- tasks back in ready wake an idle worker; a slot freed under a running limit does too
if back > 0 then wake(KEYS[7]) elseif #expired > 0 then slot_freed(KEYS[8], KEYS[7], ready) end
local nxt = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
return {out, #nxt == 0 and -1 or tonumber(nxt[2]), now}
