local n = #KEYS / 2
local mine = "redlock-mux:reserved:" .. ARGV[1]
local passed = 0
for i = 1, n do
  redis.call("ZREM", KEYS[n + i], ARGV[1])
  if redis.call("GET", KEYS[i]) == mine then
    redis.call("DEL", KEYS[i])
    ring(KEYS[i], KEYS[n + i], ARGV[2], false, ARGV[1])
    passed = passed + 1
  end
end
return passed
