-- An executor registered for a queue's next rate-limit token (fetch.lua) took work of
-- another queue instead: it will not be there when the token comes, so it leaves the
-- registration and wakes one idle executor of the queue, which fetches, finds no token and
-- registers in its place (the token is not left unused until an idle wait ends).
-- The same for a registration for a key's next token (the keys' `k:rate` hash, named after
-- the queue's rate key, in its slot: _keyed.lua).
-- KEYS: 1 rate, 2 wake
-- ARGV: 1 worker id, 2 thread name
-- Returns: 1 if a registration was the caller's and is gone, else 0 (another executor's:
--          left as it is).
local left = 0
for _, key in ipairs({KEYS[1], string.sub(KEYS[1], 1, -5) .. 'k:rate'}) do
  if redis.call('HGET', key, 'who') == ARGV[1] .. '\t' .. ARGV[2] then
    redis.call('HDEL', key, 'slot', 'who')
    left = 1
  end
end
if left == 1 then wake(KEYS[2]) end
return left
