-- Store what a running task reports about itself (progress data, a comment, a child pid).
-- KEYS: 1 tasks
-- ARGV: 1 id, 2 fencing token, 3 worker id, 4 field ('progress', 'comment' or 'pid'), 5 value
-- Returns: 1 if stored, 0 if this run does not hold the task's lease any more.
local fields = {progress = true, comment = true, pid = true}
if not fields[ARGV[4]] then return redis.error_reply('progress: unknown field ' .. ARGV[4]) end
local meta, payload = load(KEYS[1], ARGV[1])
if not holds(meta, ARGV[2], ARGV[3]) then return 0 end
meta[ARGV[4]] = ARGV[5]
save(KEYS[1], ARGV[1], meta, payload)
return 1
