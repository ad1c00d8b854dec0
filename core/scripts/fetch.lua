-- Lease up to N ready tasks, highest priority first, FIFO within a level.
-- KEYS: 1 tasks, 2 ready:high, 3 ready:normal, 4 ready:low, 5 running, 6 paused, 7 wake,
--       8 fence (the queue's lease counter), 9 config (`max_running`: leases at once, queue-
--       wide; a lease counts until it is acked, failed, released or reaped; `max_pending`
--       and `when_full`: see room_made), 10 overflow, 11 room
-- ARGV: 1 worker id, 2 thread name, 3 lease_ms, 4 max tasks
-- Returns: flat list {id, token, failures, payload, ...}. `token` is the fencing token that
--          ack/fail/renew/progress/release must present: it comes from the queue's counter,
--          so it is larger than every token handed out before for any task of the queue.
--          `failures` is how many runs of this series failed before (what `retries` counts).
if redis.call('EXISTS', KEYS[6]) == 1 then return {} end
local worker, thread, lease, limit = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local capped = false
local cfg = redis.call('HMGET', KEYS[9], 'max_running', 'max_pending', 'when_full')
local cap = cfg[1]
if cap then
  local free = tonumber(cap) - redis.call('ZCARD', KEYS[5])
  if free <= 0 then return {} end
  if free <= limit then limit, capped = free, true end
end
local now = now_ms()
local taken = {}
local left = redis.call('HMGET', KEYS[1], '#high', '#normal', '#low')  -- leftovers, _lib.lua
for i, level in ipairs({'high', 'normal', 'low'}) do
  while #taken < limit do
    local entry = redis.call('LPOP', KEYS[i + 1])
    if not entry then break end
    -- a leftover (a deleted or moved task's old entry) is dropped with its mark
    local id, meta, payload = popped(KEYS[1], level, entry, 'queued', left[i] ~= false)
    if id then taken[#taken + 1] = {id, meta, payload} end
  end
end
-- the queue drained by #taken: fill it from its overflow buffer, free blocked producers
if cfg[2] or redis.call('LLEN', KEYS[10]) > 0 then
  local q = {tasks = KEYS[1], ready = {high = KEYS[2], normal = KEYS[3], low = KEYS[4]},
             overflow = KEYS[10], room = KEYS[11], wake = KEYS[7]}
  room_made(q, tonumber(cfg[2]), cfg[3], #taken, 1000)
end
local out = {}
if #taken == 0 then return out end
local first = redis.call('INCRBY', KEYS[8], #taken) - #taken
for i, t in ipairs(taken) do
  local id, meta, payload = t[1], t[2], t[3]
  meta.state = 'running'
  meta.fence = string.format('%d', first + i)
  meta.attempts = (meta.attempts or 0) + 1
  meta.started = now
  meta.worker, meta.thread = worker, thread
  save(KEYS[1], id, meta, payload)
  redis.call('ZADD', KEYS[5], now + lease, id)
  out[#out + 1] = id
  out[#out + 1] = meta.fence
  out[#out + 1] = meta.failures or 0
  out[#out + 1] = payload
end
-- more is ready than this caller took: wake another idle worker (chain wake-up), unless the
-- running limit is what stopped it (the end of a run wakes the next one, see slot_freed)
if #taken == limit and not capped then
  for i = 2, 4 do
    if redis.call('LLEN', KEYS[i]) > 0 then wake(KEYS[7]); break end
  end
end
return out
