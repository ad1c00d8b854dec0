-- Store what a running task reports about itself (progress data, a comment, a child pid).
-- KEYS: 1 tasks
-- ARGV: 1 id, 2 attempts (fencing token), 3 field ('progress', 'comment' or 'pid'), 4 value
-- Returns: 1 if stored, 0 if the task is not running under that token any more.
local meta, payload = load(KEYS[1], ARGV[1])
if not meta or meta.state ~= 'running' or meta.attempts ~= tonumber(ARGV[2]) then return 0 end
meta[ARGV[3]] = ARGV[4]
save(KEYS[1], ARGV[1], meta, payload)
return 1
