local n = tonumber(ARGV[3])
local mine = "redlock-mux:reserved:" .. ARGV[1]
local claim = tonumber(ARGV[2])
local yours, longest, ticket = true, -2, 0
for i = 1, n do
  local q = KEYS[n + i]
  local t = redis.call("PTTL", KEYS[i])
  local v = false
  if t >= 0 and t <= claim then v = redis.call("GET", KEYS[i]) end
  if v == mine then
    t = -3
  else
    if v and string.sub(v, 1, 21) == "redlock-mux:reserved:" then
      t = t + tonumber(ARGV[5])
    end
    local last = redis.call("ZRANGE", q, -1, -1, "WITHSCORES")
    local next = 1
    if last[2] then next = tonumber(last[2]) + 1 end
    local own = next
    if redis.call("ZADD", q, "NX", next, ARGV[1]) == 1 then
      redis.call("PEXPIRE", q, ARGV[4])
    else
      own = tonumber(redis.call("ZSCORE", q, ARGV[1]))
    end
    if own > ticket then ticket = own end
    if t == -2 then
      if ring(KEYS[i], q, ARGV[2], ARGV[1], ARGV[1]) == ARGV[1] then
        t = -3
      else
        t = redis.call("PTTL", KEYS[i])
      end
    elseif v and string.sub(v, 1, 21) == "redlock-mux:reserved:"
        and redis.call("ZRANGE", q, 1, 1)[1] == ARGV[1] then
      rang(ARGV[1], "+ " .. KEYS[i])
    end
  end
  if t ~= -3 then
    yours = false
    if longest ~= -1 and (t == -1 or t > longest) then longest = t end
  end
end
if yours then return {-3, ticket} end
if n > 1 and settle(KEYS, n, ARGV[1], ARGV[2]) then
  local half = math.floor(claim / 2)
  if longest == -1 or longest > half then longest = half end
end
return {longest, ticket}
