-- A worker records its run of a broadcast: started, then done or failed.
-- KEYS: 1 the broadcast's record (hash), 2 broadcast-runs (stream)
-- ARGV: 1 broadcast id, 2 worker id, 3 'running' | 'done' | 'failed', 4 error text ('' when
--       none), 5 result JSON ('' when none), 6 stream cap
-- Returns: 1 if recorded on the broadcast, 0 if its record had expired (the run is added to
--          the broadcast-runs stream all the same). The record's field `w:<worker>` holds
--          {state, started, ended, error, result}, times in ms on Redis's clock.
local now = now_ms()
local field, state = 'w:' .. ARGV[2], ARGV[3]
local kept = 0
if redis.call('EXISTS', KEYS[1]) == 1 then
  local run = {state = state, started = now}
  if state ~= 'running' then
    local old = redis.call('HGET', KEYS[1], field)
    local ok, prev = pcall(cjson.decode, old or '')
    if ok and type(prev) == 'table' and prev.started then run.started = prev.started end
    run.ended = now
    if ARGV[4] ~= '' then run.error = ARGV[4] end
    if ARGV[5] ~= '' then run.result = ARGV[5] end
  end
  redis.call('HSET', KEYS[1], field, cjson.encode(run))
  kept = 1
end
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[6], '*',
  'id', ARGV[1], 'worker', ARGV[2], 'state', state, 'at', now)
return kept
