-- Give one key of a queue a weight (docs/queue-controls.md, "Per-key limits and fair
-- turns"): a key of weight W takes W tasks in a row each turn, the others one; 1 clears it.
-- It holds for the key until changed, whether it has tasks waiting or not (_keyed.lua).
-- KEYS: 1 tasks (the keyed keys are named after it, in its slot)
-- ARGV: 1 the weight (an int from 1 to 1000), 2 the key
-- Returns: 1.
return KEYED.weigh(KEYS[1], ARGV[2], tonumber(ARGV[1]))
