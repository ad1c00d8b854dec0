-- Give back leased tasks this worker will not run (graceful stop, prefetched leftovers).
-- KEYS: 1 tasks, 2 running, 3 ready:high, 4 ready:normal, 5 ready:low, 6 wake
-- ARGV: 1 worker id, then pairs: id, fencing token
-- Returns: how many were put back at the head of their ready list. Neither `failures` nor
--          `lost` counts a release; a late ack of the released run is refused (its token
--          is not the live one any more once the task is fetched again).
local ready = {high = KEYS[3], normal = KEYS[4], low = KEYS[5]}
local worker = ARGV[1]
local back = 0
for i = #ARGV - 1, 2, -2 do
  local id, token = ARGV[i], ARGV[i + 1]
  local meta, payload = load(KEYS[1], id)
  if holds(meta, token, worker) then
    redis.call('ZREM', KEYS[2], id)
    clear_run(meta, KEYS[1])
    meta.state = 'queued'
    push_ready(KEYS[1], ready, id, meta, payload, true)
    back = back + 1
  end
end
if back > 0 then wake(KEYS[6]) end
return back
