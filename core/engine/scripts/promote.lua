-- Move delayed tasks whose due time has come to the tail of their ready list (a task a task
-- rate limit held: to the head, see fetch.lua).
-- KEYS: 1 tasks, 2 delayed, 3 ready:high, 4 ready:normal, 5 ready:low, 6 wake
-- ARGV: 1 max tasks
-- Returns: {moved, next due ms or -1, Redis time ms}. Idempotent: any number of workers may
--          call it. The time lets a client wait for the next due instant on Redis's clock.
local ready = {high = KEYS[3], normal = KEYS[4], low = KEYS[5]}
local now = now_ms()
local due = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
local moved, held = 0, {}
for _, id in ipairs(due) do
  redis.call('ZREM', KEYS[2], id)
  local meta, payload = load(KEYS[1], id)
  if meta and meta.state == 'delayed' then
    meta.state = 'queued'  -- `due` stays: the waiting time counts from it (_lib.lua)
    if meta.held then
      held[#held + 1] = {id, meta, payload}
    else
      push_ready(KEYS[1], ready, id, meta, payload, false)
    end
    moved = moved + 1
  end
end
-- tasks a task rate limit held (fetch.lua) go back to the head of their level, where they
-- were taken from, in the order of their tokens
for i = #held, 1, -1 do
  push_ready(KEYS[1], ready, held[i][1], held[i][2], held[i][3], true)
end
if moved > 0 then wake(KEYS[6]) end
local nxt = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
if #nxt == 0 then return {moved, -1, now} end
return {moved, tonumber(nxt[2]), now}
