-- Extend the leases a worker still holds (called by its heartbeat).
-- KEYS: 1 tasks, 2 running
-- ARGV: 1 worker id, 2 lease ms, then pairs: id, fencing token
-- Returns: the ids whose lease this worker no longer holds (reaped and handed on, deleted);
--          not those whose run ended already (acked or failed: see settle in _lib.lua).
local worker, lease = ARGV[1], tonumber(ARGV[2])
local deadline = now_ms() + lease
local lost = {}
for i = 3, #ARGV, 2 do
  local id, token = ARGV[i], ARGV[i + 1]
  local meta = load(KEYS[1], id)
  if holds(meta, token, worker) then
    redis.call('ZADD', KEYS[2], 'XX', deadline, id)
  elseif not settled_by(meta, token) then
    lost[#lost + 1] = id
  end
end
return lost
