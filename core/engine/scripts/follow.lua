-- What became of every task one redo put back (the console's "after a redo" page): the
-- count per state now over the whole follow set, and one page of it (of every task, or of
-- those in one state). Read only; each record's state is read from its meta line.
-- KEYS: 1 tasks, 2 the redo's follow set (id -> redone at ms, redo.lua)
-- ARGV: 1 state the page lists ('' = every task), 2 entries of that list to skip, 3 page size,
--       4 most ids of the tasks that failed again to return besides (0: none)
-- Returns: {counts, page, first, again}: counts a flat list state, n (states: queued,
--          delayed, running, done, error, expired, none = the record is gone); page a flat
--          list id, redone at, state; first the earliest redone at (0: empty); again the
--          first ARGV[4] ids in state error (what the page's "Redo again" acts on).
local want, skip, size = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local most_again = tonumber(ARGV[4] or '0') or 0
local counts, page, order, again = {}, {}, {}, {}
local first, seen = 0, 0
local entries = redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')
for i = 1, #entries, 2 do
  local id, at = entries[i], entries[i + 1]
  if first == 0 then first = tonumber(at) end
  local raw = redis.call('HGET', KEYS[1], id)
  local state = 'none'
  if raw then
    local nl = string.find(raw, '\n', 1, true)
    local head = nl and string.sub(raw, 1, nl - 1) or ''
    if string.find(head, '^%d+$') then
      state = 'queued'
    else
      state = string.match(head, '"state":"([a-z]+)"') or decode(raw).state or 'none'
    end
  end
  if not counts[state] then order[#order + 1] = state end
  counts[state] = (counts[state] or 0) + 1
  if state == 'error' and #again < most_again then again[#again + 1] = id end
  if want == '' or want == state then
    seen = seen + 1
    if seen > skip and #page < size * 3 then
      page[#page + 1], page[#page + 2], page[#page + 3] = id, at, state
    end
  end
end
local flat = {}
for _, state in ipairs(order) do
  flat[#flat + 1], flat[#flat + 2] = state, counts[state]
end
return {flat, page, first, again}
