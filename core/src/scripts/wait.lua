local n = tonumber(ARGV[3])
local yours, longest = true, -2
for i = 1, n do
  local q = KEYS[n + i]
  if redis.call("ZSCORE", q, ARGV[1]) == false then
    local last = redis.call("ZRANGE", q, -1, -1, "WITHSCORES")
    local ticket = 1
    if last[2] then ticket = tonumber(last[2]) + 1 end
    redis.call("ZADD", q, ticket, ARGV[1])
  end
  redis.call("PEXPIRE", q, ARGV[4])
  if redis.call("EXISTS", KEYS[i]) == 0 then ring(KEYS[i], q, ARGV[2], ARGV[1]) end
  if redis.call("GET", KEYS[i]) ~= "redlock-mux:reserved:" .. ARGV[1] then
    yours = false
    local t = redis.call("PTTL", KEYS[i])
    if longest ~= -1 and (t == -1 or t > longest) then longest = t end
  end
end
if yours then return -3 end
return longest
