local n = #KEYS / 2
local mine = "redlock-mux:reserved:" .. ARGV[1]
local passed = 0
for i = 1, n do
  local three = redis.pcall("ZRANGE", KEYS[n + i], 0, 2)
  local bad = three.err if bad then three = {} else redis.call("ZREM", KEYS[n + i], ARGV[1]) end
  local v = redis.pcall("GET", KEYS[i]) if type(v) == "table" then v = "" end
  if v == mine then
    redis.call("DEL", KEYS[i])
    if not bad then ring(KEYS[i], KEYS[n + i], ARGV[2], false, ARGV[1]) end
    passed = passed + 1
  elseif three[2] == ARGV[1] and three[3] then
    if not v then
      ring(KEYS[i], KEYS[n + i], ARGV[2], false, ARGV[1])
    elseif string.sub(v, 1, 21) == "redlock-mux:reserved:" then
      rang(three[3], "+ " .. KEYS[i])
    end
  end
end
return passed
