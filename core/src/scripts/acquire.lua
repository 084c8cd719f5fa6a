local n = tonumber(ARGV[3])
for i = 1, n do
  if not redis.call("SET", KEYS[i], ARGV[1], "NX", "PX", ARGV[2]) then
    for j = 1, i - 1 do redis.call("DEL", KEYS[j]) end
    return -i
  end
end
if #KEYS > n then return redis.call("INCR", KEYS[n + 1]) end
return 0
