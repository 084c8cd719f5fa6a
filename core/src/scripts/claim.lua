local n = tonumber(ARGV[3])
local mine = "redlock-mux:reserved:" .. ARGV[4]
local handed = ARGV[6]
local took = {}
for i = 1, n do
  local v = redis.call("GET", KEYS[i])
  if v == false then
    if ring(KEYS[i], KEYS[n + i], ARGV[5], ARGV[4], ARGV[4]) then
      v = redis.call("GET", KEYS[i])
    end
  end
  if v ~= false and v ~= mine and not (handed ~= "" and v == handed) then
    if n > 1 then settle(KEYS, n, ARGV[4], ARGV[5]) end
    return -i
  end
  took[i] = handed ~= "" and v == handed
end
for i = 1, n do
  redis.call("SET", KEYS[i], ARGV[1], "PX", ARGV[2])
  if took[i] then
    redis.call("SET", "redlock-mux:taken:" .. KEYS[i], handed, "PX", ARGV[5] * 16)
  end
  redis.call("ZREM", KEYS[n + i], ARGV[4])
  redis.call("SET", "redlock-mux:served:" .. KEYS[i], ARGV[4] .. " " .. ARGV[1], "PX", ARGV[2]) if redis.pcall("GET", "redlock-mux:rung:" .. KEYS[i]) == ARGV[4] then redis.call("DEL", "redlock-mux:rung:" .. KEYS[i]) end
end
if #KEYS > 2 * n then return redis.call("INCR", KEYS[2 * n + 1]) end
return 0
