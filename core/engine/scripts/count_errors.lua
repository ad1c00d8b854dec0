-- One step of the one-time count of a queue's error list into the exact error counters
-- (_lib.lua, "Exact error counters"), for a list written before them (docs/console.md,
-- "Exact counts"). Each call counts the next ARGV[1] entries, oldest first, and keeps its
-- position in `#eb`, so Redis is never blocked long; moves meanwhile count by that position.
-- KEYS: 1 tasks, 2 errors
-- ARGV: 1 most entries counted in this call
-- Returns: 1 when the counters hold the whole list (now or before), 0 when more is left.
local tasks, errors, most = KEYS[1], KEYS[2], tonumber(ARGV[1])
local mark = redis.call('HGET', tasks, '#eb')
if mark == '1' then return 1 end
local at, last = '-inf', nil
if mark then at, last = string.match(mark, '^(%S+) (.*)$') end
local counted, offset, score_at, id_at = 0, 0, nil, nil
while counted < most do
  local page = redis.call('ZRANGEBYSCORE', errors, at, '+inf', 'WITHSCORES', 'LIMIT', offset, most)
  if #page == 0 then break end
  for i = 1, #page, 2 do
    local id, score = page[i], page[i + 1]
    if not (last and tonumber(score) == tonumber(at) and id <= last) then
      local meta = load(tasks, id)
      if meta and meta.state == 'error' then
        local g, k, parts = err_keys(meta, true)
        local info = cjson.encode({t = parts[1], f = parts[2], k = parts[3],
          m = err_message(tostring(meta.error or '')), at = tonumber(score), id = id})
        local again = type(meta.redone) == 'number' and meta.redone > 0
        err_bump(tasks, 'g', g, 1, info, true, again)
        err_bump(tasks, 'k', k, 1, info, false, again)
      end
      counted, score_at, id_at = counted + 1, score, id
      if counted >= most then break end
    end
  end
  offset = offset + #page / 2
end
if counted < most then
  redis.call('HSET', tasks, '#eb', '1')
  return 1
end
redis.call('HSET', tasks, '#eb', score_at .. ' ' .. id_at)
return 0
