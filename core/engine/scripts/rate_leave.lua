-- An executor registered for a queue's next rate-limit token (fetch.lua) took work of
-- another queue instead: it will not be there when the token comes, so it leaves the
-- registration and wakes one idle executor of the queue, which fetches, finds no token and
-- registers in its place (the token is not left unused until an idle wait ends).
-- KEYS: 1 rate, 2 wake
-- ARGV: 1 worker id, 2 thread name
-- Returns: 1 if the registration was the caller's and is gone, else 0 (another executor's:
--          left as it is).
if redis.call('HGET', KEYS[1], 'who') ~= ARGV[1] .. '\t' .. ARGV[2] then return 0 end
redis.call('HDEL', KEYS[1], 'slot', 'who')
wake(KEYS[2])
return 1
